#!/usr/bin/env bash
# Fails when an include points up the layering of DESIGN.md section 5:
#   core <- kernels <- model <- cache <- spec <- engine <- server <- apps; tokenizer <- core only.
# A file in layer L may include its own layer and the layers below it, nothing above.
set -euo pipefail
cd "$(dirname "$0")/.."
order=(core kernels model cache spec engine server)
status=0
for i in "${!order[@]}"; do
  layer=${order[$i]}
  [ -d "src/$layer" ] || continue
  above=("${order[@]:$((i + 1))}" tokenizer)
  [ "$layer" = core ] && above=("${order[@]:1}" tokenizer)
  for up in "${above[@]}"; do
    if hits=$(grep -rn --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
        "#include \"$up/" "src/$layer"); then
      echo "layering: src/$layer includes src/$up (DESIGN.md section 5):"
      echo "$hits"
      status=1
    fi
  done
done
for up in kernels model cache spec engine server; do
  if hits=$(grep -rn "#include \"$up/" src/tokenizer); then
    echo "layering: src/tokenizer includes src/$up (it depends on core only):"
    echo "$hits"
    status=1
  fi
done
[ $status -eq 0 ] && echo "layers: every include points down"
exit $status
