#!/usr/bin/env bash
# The console's browser tests drive Debian's chromium (Playwright's own browser download is not reachable), and
# its Japanese screenshots need a CJK font: install whichever is missing from the system's packages.
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
fc-list :lang=ja 2>/dev/null | grep -q . || missing+=(fonts-noto-cjk)
if [ ${#missing[@]} -eq 0 ]; then echo "browser: chromium and a Japanese font are installed"; exit 0; fi
echo "browser: installing ${missing[*]} from the system packages"
if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; fi
