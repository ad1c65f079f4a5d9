#!/bin/sh
# Turns a program's --help text into a man page (section 1) for `cmake --install` and the
# .deb: the text as is, in a no-fill block, so `man sac-learner` shows exactly --help.
# usage: help2man.sh PROGRAM NAME VERSION OUT
set -eu
prog=$1 name=$2 version=$3 out=$4
text=$(env -u SAC_CONFIG "$prog" --help)
summary=$(printf '%s\n' "$text" | sed -n '2p' | sed "s/^$name: //")
{
  printf '.TH %s 1 "" "sacfleet %s" "sacfleet"\n' "$(echo "$name" | tr '[:lower:]' '[:upper:]')" "$version"
  printf '.SH NAME\n%s \\- %s\n.SH DESCRIPTION\n.nf\n' "$name" "$(printf '%s' "$summary" | sed 's/\\/\\e/g')"
  # roff: backslashes escaped, lines that start with . or ' made literal
  printf '%s\n' "$text" | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
  printf '.fi\n.SH SEE ALSO\nThe sacfleet documentation in /usr/share/doc/sacfleet (README.md, docs/).\n'
} >"$out.tmp"
mv "$out.tmp" "$out"
