#!/usr/bin/env bash
# libdifftx.so (make lib): its soname carries the header's major version; it
# exports exactly the functions include/difftx.h declares (read by gcc's
# -aux-info, not by the Makefile's sed that made the version script): none
# missing, no internal one; a program built against the header alone links
# and runs with it, and one that calls an internal function does not link.
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
build=${DIFFTX_BUILD:-build}
major=$(sed -n 's/^#define DTX_VERSION_MAJOR \([0-9]*\).*/\1/p' include/difftx.h)
so=$build/libdifftx.so.$major
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }

if [ ! -e "$so" ]; then
    fail shared_lib_built "$so is missing (make lib)"
    echo "$passed passed, $failed failed"; exit 1
fi
soname=$(objdump -p "$so" | awk '$1 == "SONAME" { print $2 }')
[ "$soname" = "libdifftx.so.$major" ] && ok shared_lib_soname || fail shared_lib_soname "SONAME is '$soname'"

gcc -std=c11 -fsyntax-only -Iinclude -aux-info "$tmp/aux" -x c include/difftx.h 2>"$tmp/err" ||
    fail shared_lib_header "gcc could not read the header: $(head -n 1 "$tmp/err")"
grep '^/\* include/difftx.h:' "$tmp/aux" | grep -o 'dtx_[a-z0-9_]* (' | tr -d ' (' | sort -u > "$tmp/declared"
nm -D --defined-only "$so" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' | sort -u > "$tmp/exported"
n=$(wc -l < "$tmp/declared")
missing=$(comm -23 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
extra=$(comm -13 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
if [ "$n" -lt 100 ]; then fail shared_lib_exports "only $n declarations read from the header"
elif [ -n "$missing" ]; then fail shared_lib_exports "declared but not exported: $missing"
elif [ -n "$extra" ]; then fail shared_lib_exports "exported but not in the header: $extra"
else ok "shared_lib_exports ($n functions)"; fi

cat > "$tmp/client.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "difftx.h"
int main(void) {
    dtx_config c = dtx_config_default();
    c.dim = 32, c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 2, c.vocab_size = 40, c.ffn_dim = 48, c.max_seq_len = 8;
    dtx_model *m = NULL;
    if (dtx_model_init(&m, &c, 1) != DTX_OK) return 2;
    int32_t ids[4] = {1, 2, 3, 4};
    double loss = 0;
    if (dtx_model_forward(m, ids, ids, 1, 4, NULL, &loss) != DTX_OK || !(loss > 0)) return 3;
    dtx_model *bad = NULL;
    c.dim = 33;
    if (dtx_model_init(&bad, &c, 1) != DTX_ERR_CONFIG || !strstr(dtx_last_error(), "dim")) return 4;
    dtx_model_free(m);
    printf("%s %.3f\n", dtx_version(), loss);
    return 0;
}
C
# an ASan build's library needs its runtime linked first: the client is built with the same flags
san=${DIFFTX_SAN:-}
if gcc -std=c11 $san -Iinclude "$tmp/client.c" -L"$build" -l:libdifftx.so.$major -o "$tmp/client" 2>"$tmp/err"; then
    out=$(LD_LIBRARY_PATH=$build "$tmp/client" 2>&1) && ok "shared_lib_client ($out)" ||
        fail shared_lib_client "the client failed (exit $?): $out"
else
    fail shared_lib_client "did not link: $(head -n 3 "$tmp/err" | tr '\n' ' ')"
fi
printf '#include "difftx.h"\nint dtx_fail(int, const char *, ...);\nint main(void) { return dtx_fail(1, "x"); }\n' > "$tmp/internal.c"
if gcc -std=c11 $san -Iinclude "$tmp/internal.c" -L"$build" -l:libdifftx.so.$major -o "$tmp/internal" 2>/dev/null; then
    fail shared_lib_hides_internals "a program calling the internal dtx_fail linked"
else
    ok shared_lib_hides_internals
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
