#!/bin/sh
# Install memsight's desktop entry, icons and profile file type for the current user.
#
#   ./install.sh            from a standalone build folder: uses the memsight beside this script
#   packaging/install.sh    from a source checkout or pip install: uses `memsight` on PATH
#
# PREFIX (default ~/.local) decides where: $PREFIX/share/applications, .../icons, .../mime.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
prefix=${PREFIX:-$HOME/.local}
if [ -x "$here/memsight" ] && [ -d "$here/share" ]; then
    exec_path="$here/memsight"
    share="$here/share"
else
    exec_path=$(command -v memsight || true)
    if [ -z "$exec_path" ]; then
        echo "install.sh: no memsight on PATH; install memsight first" >&2
        exit 1
    fi
    share=""
fi
root=$(cd "$here/.." 2>/dev/null && pwd)
mkdir -p "$prefix/share/applications" "$prefix/share/mime/packages"
if [ -n "$share" ]; then
    cp -R "$share/icons" "$prefix/share/"
    cp "$share/mime/packages/memsight.xml" "$prefix/share/mime/packages/"
    desktop="$share/applications/memsight.desktop"
else
    resources="$root/resources"
    if [ ! -f "$resources/memsight.desktop" ]; then
        # Installed with pip: the resources are a package beside memsight's own.
        resources=$("$(dirname "$exec_path")/python" -c \
            'import memsight_resources, os; print(os.path.dirname(memsight_resources.__file__))')
    fi
    for png in "$resources"/icons/memsight-*.png; do
        size=$(basename "$png" .png | sed 's/memsight-//')
        mkdir -p "$prefix/share/icons/hicolor/${size}x${size}/apps"
        cp "$png" "$prefix/share/icons/hicolor/${size}x${size}/apps/memsight.png"
    done
    mkdir -p "$prefix/share/icons/hicolor/scalable/apps"
    cp "$resources/icons/memsight.svg" "$prefix/share/icons/hicolor/scalable/apps/"
    cp "$resources/mime/memsight.xml" "$prefix/share/mime/packages/"
    desktop="$resources/memsight.desktop"
fi
sed -e "s|^Exec=memsight|Exec=\"$exec_path\"|" -e "s|^TryExec=memsight|TryExec=$exec_path|" \
    "$desktop" > "$prefix/share/applications/memsight.desktop"
command -v update-mime-database >/dev/null 2>&1 && update-mime-database "$prefix/share/mime" || true
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$prefix/share/applications" || true
command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$prefix/share/icons/hicolor" || true
echo "installed the memsight desktop entry in $prefix/share (runs $exec_path)"
