#!/usr/bin/env bash
# Fetches the real chat templates (llama.cpp's models/templates/*.jinja) that
# the template tests render, from the llama-cpp-python 0.3.36 source package
# on PyPI. They belong to other projects and are never committed here: they are
# cached under ${STEWARD_CACHE_DIR:-$HOME/.cache/steward}/templates/ and the
# last line this prints on stdout is the directory holding the .jinja files.
#
# Nothing is downloaded when the cache already holds them. Otherwise pip
# downloads the sdist (about 76 MB; its hash is pinned below), and only
# */vendor/llama.cpp/models/templates/*.jinja is extracted, into a temporary
# directory that is renamed into place, so a cache directory that exists is
# always complete.
set -euo pipefail

version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache_root="${STEWARD_CACHE_DIR:-$HOME/.cache/steward}/templates"
dest="$cache_root/llama-cpp-python-$version"

if [ -d "$dest" ] && compgen -G "$dest/*.jinja" >/dev/null; then
  echo "$dest"
  exit 0
fi

mkdir -p "$cache_root"
tmp="$(mktemp -d "$cache_root/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "llama-cpp-python==$version --hash=sha256:$sha256" >"$tmp/requirements.txt"
echo "fetch-templates: downloading llama-cpp-python==$version (sdist, ~76 MB)" >&2
python3 -m pip download --quiet --no-deps --no-binary :all: --require-hashes \
  -r "$tmp/requirements.txt" -d "$tmp/dl" >&2
sdist="$(ls "$tmp"/dl/llama_cpp_python-"$version".tar.gz)"

mkdir "$tmp/x" "$tmp/templates"
tar -xzf "$sdist" -C "$tmp/x" --wildcards --no-anchored \
  '*/vendor/llama.cpp/models/templates/*.jinja'
find "$tmp/x" -path '*/vendor/llama.cpp/models/templates/*.jinja' -type f \
  -exec mv -t "$tmp/templates" {} +
count="$(find "$tmp/templates" -name '*.jinja' -type f | wc -l)"
if [ "$count" -eq 0 ]; then
  echo "fetch-templates: no .jinja templates found in $sdist" >&2
  exit 1
fi

# Another run may have filled the cache meanwhile: keep the one already there.
if ! mv -T "$tmp/templates" "$dest" 2>/dev/null; then
  compgen -G "$dest/*.jinja" >/dev/null || {
    echo "fetch-templates: could not create $dest" >&2
    exit 1
  }
fi
echo "fetch-templates: $count templates in $dest" >&2
echo "$dest"
