#!/usr/bin/env bash
# Makes the docs' screenshots again from the browser tests: each test that
# takes a screenshot also writes the page as an SVG image holding its own
# markup and styles (text, not pixels), and this copies the ones the docs
# show here. Needs Chromium (apt-get install chromium).
#
#   docs/img/update.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
shots=$(mktemp -d)
trap 'rm -rf "$shots"' EXIT
TOLLGATE_ARTIFACTS="$shots" go test -count=1 \
	-run '^(TestStatusPageInABrowser|TestStatusPageToInvestigateWith|TestChallengePageInABrowser)$' ./caddymodule >/dev/null
cp "$shots/tollgate-status-page.svg" docs/img/status-page-cluster.svg
cp "$shots/tollgate-status-page-investigate.svg" docs/img/status-page-investigate.svg
cp "$shots/challenge-built-in.svg" docs/img/challenge-page.svg
ls -l docs/img/*.svg
