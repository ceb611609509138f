#!/usr/bin/env bash
# autoddl-train refuses a BLAS that computes a wrong GEMM: with a defective cblas_sgemm preloaded
# (wrong_sgemm.cpp: drops a term where A is transposed and k > 100) on both ranks it must exit 2
# before training, naming the library, the form and the workaround in one sentence; without it
# the same command trains.
#   blas_check.sh <mpirun> <autoddl-train> <libwrong_sgemm.so>
set -uo pipefail
mpirun=$1 train=$2 wrong=$3
args=(--model mlp:layers=2,hidden=16,batch=8,in=8,out=4 --mesh 2 --steps 1)
out=$(timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np 2 -x LD_PRELOAD="$wrong" "$train" "${args[@]}" 2>&1)
rc=$?
want='^autoddl-train: the BLAS library \(.*\) computes sgemm C = A\^T B with m=129, n=97, k=161 wrongly \(element \[0,0\] is .*, a plain loop gives .*\); set OPENBLAS_CORETYPE to another kernel family \(e\.g\. OPENBLAS_CORETYPE=Haswell\) or link another BLAS, then rerun$'
if [ "$rc" -ne 2 ]; then echo "with the defective sgemm: expected exit 2, got $rc:"; echo "$out"; exit 1; fi
if ! grep -Eq "$want" <<<"$out"; then echo "exit 2 but no line matching '$want':"; echo "$out"; exit 1; fi
if [ "$(grep -c 'BLAS library' <<<"$out")" -ne 1 ]; then echo "expected the sentence once (rank 0):"; echo "$out"; exit 1; fi
echo "refused: $(grep 'BLAS library' <<<"$out")"
out=$(timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$train" "${args[@]}" 2>&1)
rc=$?
if [ "$rc" -ne 0 ]; then echo "without the defective sgemm: expected exit 0, got $rc:"; echo "$out"; exit 1; fi
echo "the linked BLAS passes the check and the same command trains"
