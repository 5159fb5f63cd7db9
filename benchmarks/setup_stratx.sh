#!/usr/bin/env bash
# Create the two reference environments for timing stratx 0.5 next to daskpd.
#
#   stratx-new : stratx 0.5 + whatever current numpy/pandas/sklearn/numba pip picks.
#                StratPD (partial_dependence) works; CatStratPD does NOT
#                (stratx uses np.float / np.int, removed in numpy 1.24).
#   stratx-old : stratx 0.5 + numpy 1.23.5 and contemporary (mid-2023) wheels
#                for Python 3.11, so CatStratPD and importances(catcolnames=...) run.
#
# Both live OUTSIDE the repo, under ${STRATX_VENV_ROOT:-$HOME/.cache/daskpd-bench}.
# Nothing is installed into the project venv.
#
# Usage:  benchmarks/setup_stratx.sh [--force] [new|old|all]     (default: all)
#   --force   delete and rebuild the venv(s) even if they already pass the check
# Env:    STRATX_VENV_ROOT  where the venvs go
#         STRATX_PYTHON     interpreter to build them from (must be CPython 3.11;
#                           the stratx-old pins are chosen for cp311 wheels)
#
# Idempotent: a venv that already passes its smoke test is left alone.
# Exit status: 0 if every requested venv works, 1 if any failed (each failure is
# reported by name; a failure of one venv does not stop the other).
set -u

ROOT="${STRATX_VENV_ROOT:-$HOME/.cache/daskpd-bench}"
FORCE=0
WHICH=all
for a in "$@"; do
    case "$a" in
        --force) FORCE=1 ;;
        new|old|all) WHICH="$a" ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "setup_stratx: unknown argument '$a'" >&2; exit 2 ;;
    esac
done

# ---------------------------------------------------------------- interpreter
find_python() {
    local cands=()
    [ -n "${STRATX_PYTHON:-}" ] && cands+=("$STRATX_PYTHON")
    cands+=(python3.11 "$HOME/.pyenv/versions/3.11.7/bin/python3.11" python3 python)
    for c in "${cands[@]}"; do
        if command -v "$c" >/dev/null 2>&1 &&
           "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2]==(3,11) else 1)' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    return 1
}
PY="$(find_python)" || {
    echo "setup_stratx: ERROR: no CPython 3.11 interpreter found (set STRATX_PYTHON)" >&2
    exit 1
}

# ---------------------------------------------------------------- pins
# stratx-old: numpy<1.24 so np.float/np.int still exist. numba 0.57.x is the
# first numba with cp311 wheels and still accepts numpy 1.23; the rest are the
# last releases of mid/late 2023 that ship cp311 wheels and support numpy 1.23.
OLD_PINS=(
    "numpy==1.23.5"
    "numba==0.57.1"
    "llvmlite==0.40.1"
    "pandas==2.0.3"
    "scikit-learn==1.3.2"
    "scipy==1.11.4"
    "matplotlib==3.7.5"
    "contourpy<1.3"
    "pyarrow==14.0.2"
)
# packages that must come as wheels (never build numpy & co. from source here)
BINARY_ONLY="numpy,numba,llvmlite,pandas,scikit-learn,scipy,matplotlib,contourpy,kiwisolver,pillow,fonttools,pyarrow"

# ---------------------------------------------------------------- smoke tests
# Run inside the venv. $1 = new|old. Prints versions; exits non-zero on failure.
smoke() {
    local kind="$1" vpy="$2"
    MPLBACKEND=Agg "$vpy" - "$kind" <<'PYEOF'
import sys, warnings
kind = sys.argv[1]
warnings.simplefilter("ignore")
import numpy as np, pandas as pd, pyarrow, sklearn, numba, scipy, matplotlib
import stratx
from stratx.partdep import partial_dependence, cat_partial_dependence
from importlib.metadata import version
vers = {p: version(p) for p in
        ["stratx", "numpy", "pandas", "scikit-learn", "scipy", "numba",
         "llvmlite", "matplotlib", "pyarrow"]}
print("   versions:", " ".join(f"{k}={v}" for k, v in vers.items()))
if vers["stratx"] != "0.5":
    sys.exit("stratx is not 0.5")
npv = tuple(int(p) for p in np.__version__.split(".")[:2])
if kind == "old" and npv >= (1, 24):
    sys.exit(f"stratx-old has numpy {np.__version__} (needs <1.24)")
rng = np.random.default_rng(0)
n = 2000
x1 = np.round(rng.uniform(0, 3, n), 1)
x2 = x1 + rng.normal(0, .3, n)
X = pd.DataFrame({"x1": x1, "x2": x2})
y = pd.Series(x1**2 + x2 + rng.normal(0, .05, n))
# parquet round trip
import io
buf = io.BytesIO(); X.to_parquet(buf); pd.read_parquet(io.BytesIO(buf.getvalue()))
res = partial_dependence(X, y, "x1", min_samples_leaf=15, min_slopes_per_x=5)
pdpx, pdpy = res[5], res[6]
assert len(pdpx) == len(pdpy) > 5, (len(pdpx), len(pdpy))
assert abs(pdpy[-1] - 9.0) < 1.0, pdpy   # PD of x1 is x1**2, 0..3
print(f"   StratPD ok: {len(pdpx)} pd points, pd(x=3)={pdpy[-1]:.2f} (expected ~9)")
if kind == "old":
    c = rng.integers(0, 10, n)
    Xc = pd.DataFrame({"x1": x1, "c": c})
    yc = pd.Series(x1 + 2.0 * c + rng.normal(0, .05, n))
    _, _, avg, cnt, _ = cat_partial_dependence(Xc, yc, "c", min_samples_leaf=5)
    d = avg[np.isfinite(avg)]
    assert len(d) == 10, avg
    print(f"   CatStratPD ok: effect range {d.max() - d.min():.2f} (expected ~18)")
else:
    # document (not fail on) the known numpy>=1.24 incompatibility
    try:
        c = rng.integers(0, 10, n)
        cat_partial_dependence(pd.DataFrame({"x1": x1, "c": c}),
                               pd.Series(x1 + c), "c")
        print("   CatStratPD: unexpectedly works with this numpy")
    except AttributeError as e:
        msg = str(e).splitlines()[0]
        print(f"   CatStratPD: fails as expected on numpy {np.__version__}: {msg}")
PYEOF
}

# ---------------------------------------------------------------- build one venv
build() {
    local kind="$1" dir="$ROOT/stratx-$1"
    local vpy="$dir/bin/python"
    local t0=$SECONDS
    echo "== stratx-$kind  ($dir)"
    if [ "$FORCE" = 0 ] && [ -x "$vpy" ]; then
        if smoke "$kind" "$vpy"; then
            echo "== stratx-$kind: already works, skipped"
            return 0
        fi
        echo "   existing venv fails its check; rebuilding"
    fi
    # only ever remove the venv directory this script owns
    case "$dir" in */stratx-new|*/stratx-old) rm -rf -- "$dir" ;; esac
    mkdir -p "$ROOT"
    "$PY" -m venv "$dir" || { echo "== stratx-$kind: FAILED (venv creation)"; return 1; }
    "$vpy" -m pip install --quiet --upgrade pip setuptools wheel 2>&1 |
        grep -v 'is ignored: it is neither'
    [ "${PIPESTATUS[0]}" = 0 ] ||
        { echo "== stratx-$kind: FAILED (pip bootstrap)"; return 1; }
    local log="$dir/install.log"
    if [ "$kind" = new ]; then
        # current releases; numpy>=1.24 on purpose (that is what this venv is for)
        "$vpy" -m pip install --only-binary "$BINARY_ONLY" \
            "stratx==0.5" "numpy>=1.24" pyarrow >"$log" 2>&1
    else
        local cfile="$dir/constraints.txt"
        printf '%s\n' "${OLD_PINS[@]}" >"$cfile"
        "$vpy" -m pip install --only-binary "$BINARY_ONLY" -c "$cfile" \
            "stratx==0.5" "numpy<1.24" pyarrow >"$log" 2>&1
    fi
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "== stratx-$kind: FAILED: pip install exited $rc; last lines of $log:"
        grep -v 'is ignored: it is neither' "$log" | tail -15 | sed 's/^/   | /'
        return 1
    fi
    "$vpy" -m pip freeze >"$dir/versions.txt" 2>/dev/null
    if ! smoke "$kind" "$vpy"; then
        echo "== stratx-$kind: FAILED: installed but the smoke test does not pass (see above)"
        return 1
    fi
    echo "== stratx-$kind: ready in $((SECONDS - t0)) s  (python: $vpy)"
}

status=0
failed=()
case "$WHICH" in
    all)  kinds=(new old) ;;
    *)    kinds=("$WHICH") ;;
esac
for k in "${kinds[@]}"; do
    if ! build "$k"; then status=1; failed+=("stratx-$k"); fi
done
if [ $status -ne 0 ]; then
    echo "setup_stratx: NOT usable: ${failed[*]}" >&2
else
    echo "setup_stratx: ok. Runner: <venv>/bin/python $(dirname "$0")/stratx_runner.py --help"
fi
exit $status
