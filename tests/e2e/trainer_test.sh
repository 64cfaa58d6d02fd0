#!/usr/bin/env bash
# ringmaster-train on real Fashion-MNIST: a run stopped after a checkpoint
# (--max-steps, as a kill would leave it) and resumed from `latest` ends
# exactly where an uninterrupted run ends: byte-identical predictions.
# Also: bad flags exit non-zero with one line naming the flag.
set -euo pipefail
TRAIN=${RINGMASTER_TRAIN:?set RINGMASTER_TRAIN}
DIR=$(mktemp -d /tmp/rm-trainer-test.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }
common=(--model mlp --epochs 2 --batch-size 128 --data-dir "$DIR/data" --progress none --predict test --threads 1)

"$TRAIN" "${common[@]}" --checkpoint-dir "$DIR/a" --output-dir "$DIR/a-out" > "$DIR/a.log"
# Stopped mid-epoch 1, resumed; stopped again mid-epoch 2, resumed.
"$TRAIN" "${common[@]}" --checkpoint-dir "$DIR/b" --output-dir "$DIR/b-out" --max-steps 150 > "$DIR/b1.log"
grep -q "stopped at step 150" "$DIR/b1.log" || fail "no early stop: $(cat "$DIR/b1.log")"
[ ! -e "$DIR/b-out/predictions-test.csv" ] || fail "a stopped run wrote predictions"
"$TRAIN" "${common[@]}" --checkpoint-dir "$DIR/b" --output-dir "$DIR/b-out" --max-steps 700 > "$DIR/b2.log"
grep -q "resuming from .*ckpt-150 (step 150, epoch 1, batch 150)" "$DIR/b2.log" || fail "did not resume: $(cat "$DIR/b2.log")"
"$TRAIN" "${common[@]}" --checkpoint-dir "$DIR/b" --output-dir "$DIR/b-out" > "$DIR/b3.log"
grep -q "resuming from .*ckpt-700 (step 700, epoch 2" "$DIR/b3.log" || fail "did not resume: $(cat "$DIR/b3.log")"
cmp "$DIR/a-out/predictions-test.csv" "$DIR/b-out/predictions-test.csv" || fail "resumed run differs from the uninterrupted one"
[ "$(wc -l < "$DIR/a-out/predictions-test.csv")" = 10001 ] || fail "predictions are not 10000 rows + header"
pass "a run stopped twice and resumed ends with the same predictions as an uninterrupted one"
acc=$(sed -n 's/^final test accuracy //p' "$DIR/a.log")
awk -v a="$acc" 'BEGIN { exit !(a > 0.8) }' || fail "mlp accuracy $acc after 2 epochs"

# predict mode: the model comes from the checkpoint (same thread count: same rounding).
"$TRAIN" predict --checkpoint-dir "$DIR/a" --output-dir "$DIR/p" --data-dir "$DIR/data" --split test --threads 1 > "$DIR/p.log"
cmp "$DIR/a-out/predictions-test.csv" "$DIR/p/predictions-test.csv" || fail "predict mode differs from the end of training"
pass "predict mode reproduces the trainer's predictions"

# Errors: exit != 0, one line naming what to fix.
expect_error() {
  local want=$1; shift
  if out=$("$@" 2>&1); then fail "$* succeeded"; fi
  grep -q -- "$want" <<<"$out" || fail "$* said: $out"
}
expect_error "model: 'vgg' is not one of mlp, mlp-wide, lenet5, resnet" "$TRAIN" --model vgg --data-dir "$DIR/data"
expect_error "the checkpoint in .* is a mlp, not a lenet5" "$TRAIN" predict --model lenet5 --checkpoint-dir "$DIR/a" --data-dir "$DIR/data"
expect_error "no checkpoint in" "$TRAIN" predict --checkpoint-dir "$DIR/none" --data-dir "$DIR/data"
expect_error "holds a mlp checkpoint, not a lenet5" "$TRAIN" --model lenet5 --checkpoint-dir "$DIR/a" --data-dir "$DIR/data"
expect_error "--epochs" "$TRAIN" --epochs 0
pass "bad flags and mismatched checkpoints are refused with the reason"
echo "trainer_test: all passed"
