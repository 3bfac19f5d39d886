#!/usr/bin/env bash
# Install the Debian packages the worker runs as programs, when any is missing: Tesseract with its Japanese
# (horizontal and vertical) and English data for OCR, LibreOffice without its GUI for .doc/.ppt/RTF, and a
# Japanese font (the tests render Japanese scans with it). Idempotent: nothing is fetched when all are there.
set -euo pipefail
packages=(
  tesseract-ocr tesseract-ocr-jpn tesseract-ocr-jpn-vert tesseract-ocr-eng
  libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui
  fonts-ipafont-gothic
)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then echo "packages: tesseract, libreoffice and fonts installed"; exit 0; fi
echo "packages: installing ${missing[*]}"
run() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive
# The package lists are fetched only when a package cannot be found in the ones the machine has.
if ! run apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
  run apt-get update -qq
  run apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "packages: installed ${missing[*]}"
