#!/bin/sh
# Find a Chromium for the browser tests, or install Debian's `chromium`; record its path in STAMP.
#   sh tests/chromium.sh STAMP
# Looks at $TIMESHARD_CHROMIUM, then chromium, chromium-browser, google-chrome on PATH. With none,
# installs Debian's package with apt-get (as root, or through `sudo -n`). A re-run with the stamp's
# browser still there does nothing. Without a browser it explains why; under CI=true it fails.
set -u
stamp="$1"

if [ -s "$stamp" ] && [ -x "$(cat "$stamp")" ] && { [ -z "${TIMESHARD_CHROMIUM:-}" ] || [ "$(cat "$stamp")" = "$TIMESHARD_CHROMIUM" ]; }; then
    exit 0
fi

find_browser() {
    if [ -n "${TIMESHARD_CHROMIUM:-}" ]; then
        [ -x "$TIMESHARD_CHROMIUM" ] && echo "$TIMESHARD_CHROMIUM" && return 0
        echo "tests/chromium.sh: TIMESHARD_CHROMIUM=$TIMESHARD_CHROMIUM is not an executable file" >&2
        return 1
    fi
    for name in chromium chromium-browser google-chrome; do
        command -v "$name" 2>/dev/null && return 0
    done
    return 1
}

install_browser() {
    command -v apt-get >/dev/null 2>&1 || { echo "tests/chromium.sh: no apt-get here" >&2; return 1; }
    if [ "$(id -u)" = 0 ]; then
        as_root=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        as_root="sudo -n"
    else
        echo "tests/chromium.sh: installing chromium needs root or passwordless sudo" >&2
        return 1
    fi
    echo "tests/chromium.sh: no Chromium found; installing Debian's chromium with apt-get (once)" >&2
    $as_root apt-get update -qq >/dev/null \
        && DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends chromium >/dev/null
}

path=$(find_browser) || { [ -z "${TIMESHARD_CHROMIUM:-}" ] && install_browser && path=$(find_browser); } || path=""
if [ -n "$path" ]; then
    echo "$path" > "$stamp"
    exit 0
fi
rm -f "$stamp"
cat >&2 <<MSG
tests/chromium.sh: no Chromium for the browser tests (tests/e2e/test_ui_browser.py).
  Install one (Debian: apt-get install chromium), or point TIMESHARD_CHROMIUM at a Chromium or Chrome binary.
  Without it those tests skip locally and FAIL under CI=true.
MSG
case "${CI:-}" in 1|true|TRUE|True|yes) exit 1 ;; esac
exit 0
