# Sourced by the tests of the Python analysis tools (tests/scripts/*_test.sh):
# tools_test_start NAME skips the test, with the reason and the suite's
# summary line, where /usr/bin/python3 is missing (the C build never needs
# it), else makes $tmp (removed at exit) and the counters; check NAME
# EXPECTED ACTUAL counts one comparison; tools_test_end prints the summary
# line and sets the exit status.
tools_test_start() {
    test_name=$1
    cd "$(dirname "$0")/../.."
    if [ ! -x /usr/bin/python3 ]; then
        echo "SKIP $test_name: /usr/bin/python3 is not installed (the analysis tools are Python)"
        echo "0 passed, 0 failed, 1 skipped"
        exit 0
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    passed=0 failed=0
}
check() { # name expected actual
    if [ "$2" = "$3" ]; then passed=$((passed + 1)); else
        failed=$((failed + 1)); echo "FAIL ${test_name}_$1: expected '$2', got '$3'"; fi
}
tools_test_end() {
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
}
