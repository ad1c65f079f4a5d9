# shellcheck shell=bash
# free_port [TAKEN]: prints a TCP port of [20000, the low end of the kernel's ephemeral range)
# that no socket on this host uses now (any state: a listener, or the local end of a
# connection) and that is not a key of the associative array named TAKEN (ports the caller
# picked already). Below the ephemeral range, no outgoing connection's source port takes it
# between the pick and the bind, and a reconnecting client cannot self-connect to it; a bind
# can still race another program, so callers retry on a fresh port. Returns 1 when none of
# 500 tries was free. Sourced by tests/lib_it.sh and tests/dist/lib.sh.
free_port() {
  local low used p i
  if [[ -n "${1:-}" ]]; then local -n _fp_taken=$1; else local -A _fp_taken=(); fi
  low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
  [[ "$low" =~ ^[0-9]+$ ]] && ((low > 21000)) || low=32768
  used=$(ss -Htan 2>/dev/null | awk '{n = split($4, a, ":"); print a[n]}' | sort -u)
  for ((i = 0; i < 500; i++)); do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % (low - 20000)))
    [[ -n "${_fp_taken[$p]:-}" ]] && continue
    grep -qx "$p" <<<"$used" && continue
    printf '%s' "$p"
    return 0
  done
  return 1
}
