#!/usr/bin/env bash
# Prints the file system a directory is on, and for ext4 whether it has a
# journal: the file store's figures depend on it (docs/performance.md,
# "Where a new session's file goes": without a journal, ext4 skips the
# inodes freed in the last minutes when it creates a file, and reads their
# tables to find them, so a file's creation costs more the more files were
# deleted shortly before).
#   scripts/fsinfo.sh [DIR]   (default: $TMPDIR, else /tmp)
set -euo pipefail
dir=${1:-${TMPDIR:-/tmp}}
if ! command -v findmnt >/dev/null; then
	echo "$dir: file system unknown (no findmnt)"
	exit 0
fi
read -r fstype source < <(findmnt -n -o FSTYPE,SOURCE -T "$dir")
line="$dir: $fstype on $source"
if [ "$fstype" = ext4 ]; then
	dev=$(basename "$(readlink -f "$source")")
	if compgen -G "/proc/fs/jbd2/$dev-*" >/dev/null; then
		line+=", with a journal"
	else
		line+=", without a journal (file creation slows after many deletions)"
	fi
fi
echo "$line"
