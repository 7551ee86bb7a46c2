#!/usr/bin/env bash
# Make sure the browser tests (tests/service/test_web_ui.py) find a headless Chromium and its
# driver: /usr/bin/chromium and /usr/bin/chromedriver, installed from the Debian packages when
# missing. The tests fail (they do not skip) without them.
set -euo pipefail

CHROMIUM=${CHROMIUM_BINARY:-/usr/bin/chromium}
CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver}

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# a Chinese font, so that the zh-CN page and its screenshots show characters, not boxes (best effort:
# the tests read text, not pixels)
chinese_font() {
    if command -v fc-list >/dev/null && ! fc-list | grep -qi "wqy\|cjk"; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null 2>&1 ||
            { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null 2>&1; } || true
    fi
}
chinese_font

if [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; then
    echo "Chromium: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
    exit 0
fi
echo "installing chromium chromium-driver (apt-get)"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
for binary in "$CHROMIUM" "$CHROMEDRIVER"; do
    if [ ! -x "$binary" ]; then
        echo "$binary is still missing after installing chromium and chromium-driver" >&2
        exit 1
    fi
done
echo "Chromium: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
