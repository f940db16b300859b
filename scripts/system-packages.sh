#!/usr/bin/env bash
# The Debian packages the test suite runs besides Python's: installs each one whose command is missing
# (as root; otherwise it says what to install). PostgreSQL has its own script (scripts/postgres.sh).
#
#   scripts/system-packages.sh        install what is missing
set -euo pipefail

# command → the Debian package that provides it
declare -A PACKAGES=(
    [curl]=curl  # the guides' shell examples (tests/test_docs.py)
    [jq]=jq      # the same
    [chromium]=chromium  # the web pages' browser tests (tests/e2e/test_web_pages.py), driven by Playwright
)

missing=()
for command in "${!PACKAGES[@]}"; do
    command -v "$command" >/dev/null || missing+=("${PACKAGES[$command]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ "$(id -u)" != 0 ]]; then
    echo "system-packages.sh: the tests need: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "system-packages.sh: installing Debian's ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "${missing[@]}" >/dev/null || { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
