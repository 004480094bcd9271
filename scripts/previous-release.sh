#!/usr/bin/env bash
# previous-release.sh [name|commit|version]: the previous release, as
# make release, make api-check and make upgrade-soak read it. It is the
# last v* tag when the clone has one; else (tags may not travel with the
# repository) the newest "## vX.Y.Z" section of CHANGELOG.md, released on
# the commit that added that heading. Prints nothing when there is none.
#   name     the release's name (v0.1.0)
#   commit   its commit
#   version  the version a build of HEAD stamps: the release's name at its
#            commit, else NAME-N-gCOMMIT (N commits after it), and
#            v0.0.0-devel-COMMIT when there is no release; -dirty when the
#            working tree has changes
set -euo pipefail
what=${1:-name}
cd "$(dirname "$0")/.."
head=$(git rev-parse --short=12 HEAD)
dirty=
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty=-dirty
fi
tag=
if tag=$(git describe --tags --match 'v[0-9]*' --abbrev=0 2>/dev/null); then
	name=$tag
	commit=$(git rev-parse "$tag^{commit}")
else
	tag=
	name=$(sed -n 's/^## \(v[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\)\b.*/\1/p' CHANGELOG.md | head -1)
	commit=
	if [ -n "$name" ]; then
		commit=$(git log --format=%H -S"## $name" -- CHANGELOG.md | tail -1)
	fi
fi
case $what in
name) echo "$name" ;;
commit) echo "$commit" ;;
version)
	if [ -n "${tag:-}" ]; then
		git describe --tags --match 'v[0-9]*' --dirty
	elif [ -z "$commit" ]; then
		echo "v0.0.0-devel-$head$dirty"
	elif [ "$(git rev-list --count "$commit..HEAD")" = 0 ]; then
		echo "$name$dirty"
	else
		echo "$name-$(git rev-list --count "$commit..HEAD")-g$head$dirty"
	fi
	;;
*)
	echo "previous-release.sh: want name, commit or version, not $what" >&2
	exit 2
	;;
esac
