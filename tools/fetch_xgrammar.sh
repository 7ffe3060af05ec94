#!/usr/bin/env bash
# Fetches xgrammar's PyPI sdist (C++ sources + vendored picojson/dlpack headers) into a cache directory outside
# the repository and checks its sha256. Called by cmake/xgrammar.cmake when the archive is not cached yet.
# usage: tools/fetch_xgrammar.sh VERSION SHA256 CACHE_DIR   (prints the archive path)
set -euo pipefail
version=$1 sha=$2 dir=$3
archive="$dir/xgrammar-$version.tar.gz"
mkdir -p "$dir"
if [ ! -f "$archive" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "xgrammar==$version --hash=sha256:$sha" > "$tmp/req.txt"
  # --no-binary xgrammar: the sdist, not a wheel (build requirements may still come as wheels, which pip needs
  # only to read the sdist's metadata); --require-hashes: pip itself refuses any other file.
  python3 -m pip download --quiet --no-deps --no-binary xgrammar --require-hashes -r "$tmp/req.txt" -d "$tmp/dl" >&2
  mv "$tmp/dl/xgrammar-$version.tar.gz" "$archive"
fi
echo "$sha  $archive" | sha256sum --check --quiet - >&2 || { echo "$archive: sha256 mismatch (expected $sha)" >&2; exit 1; }
echo "$archive"
