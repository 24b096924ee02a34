#!/usr/bin/env bash
# Run HERE: .devdeps/overlay holds HEAD's version of every file modified in the working tree, and
# .devdeps/overlay.remove lists the untracked files, so that a device script with HEAD_ONLY=1 can
# build the committed sources while other work in progress sits in the tree (run_fp8.sh). With
# paths (make_overlay.sh src/spec src/engine): only the files under them, so that the build takes
# the tree's work in progress except there (another engineer's unfinished files, say).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
rm -rf .devdeps/overlay && mkdir -p .devdeps/overlay
for f in $(git diff --name-only HEAD -- "$@"); do
  mkdir -p ".devdeps/overlay/$(dirname "$f")"
  git show "HEAD:$f" > ".devdeps/overlay/$f"
done
git ls-files -o --exclude-standard -- "$@" > .devdeps/overlay.remove
