#!/usr/bin/env bash
# Runs an MPI program that must abort: passes when mpirun exits non-zero within the time limit
# and stderr holds the expected message.
#   expect_abort.sh <mpirun> <program> <regex>
set -uo pipefail
out=$(timeout 60 "$1" --allow-run-as-root --oversubscribe -np 2 "$2" 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then echo "expected a failure, got exit 0"; exit 1; fi
if [ "$rc" -eq 124 ]; then echo "the job hung (killed after 60 s)"; exit 1; fi
if ! grep -Eq "$3" <<<"$out"; then echo "exit $rc but no message matching '$3':"; echo "$out"; exit 1; fi
echo "aborted with exit $rc and the expected message"
