# Sourced by the scripts here: where tools and builds live, and the one way a pinned tool set
# is installed.
#
# `$FLASHGATE_TOOLS` (default `.flashgate/`) holds the virtualenvs and npm packages the scripts
# install; CI points it outside the clone so that a fresh clone reuses them (see .ci/run).

# Absolute, so that a script may hand it on after changing directory.
TOOLS=$(realpath -m "${FLASHGATE_TOOLS:-.flashgate}")

# The Cargo target directory (`$CARGO_TARGET_DIR`, a config file's, or ./target), as Cargo
# itself resolves it.
target_dir() {
  cargo metadata --locked --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

# pinned_venv DIR REQUIREMENTS: a virtualenv in DIR holding exactly the pinned REQUIREMENTS,
# made anew whenever the file changes (the copy kept in DIR says what it holds).
pinned_venv() {
  local dir=$1 requirements=$2
  if [ ! -f "$dir/.requirements" ] || ! cmp -s "$requirements" "$dir/.requirements"; then
    echo "installing $requirements into $dir" >&2
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$dir/.requirements"
  fi
}
