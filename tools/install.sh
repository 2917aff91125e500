#!/usr/bin/env bash
# Builds Tofu (optimised: .bazelrc builds everything at -O2, its assertions kept, so that
# what is installed is what the suite tested, with no second build) and installs it under
# PREFIX:
#
#   PREFIX/bin/           tdlc, tofu-plan, tofu-run, tofu-run-gpu (the CUDA backends, which
#                         tofu-run runs for --backend cuda and nccl)
#   PREFIX/lib/           libtofu_plan.so.X.Y.Z, .so.X (its SONAME) and .so
#   PREFIX/include/tofu/  plan.h (C++ API), tofu.h (C API)
#   PREFIX/share/tofu/ops/  the operator library (.tdl files, onnx_mapping.json)
#   PREFIX/lib/pkgconfig/tofu.pc
#   PREFIX/lib/cmake/Tofu/  TofuConfig.cmake (imported target Tofu::plan), its version file
#   PREFIX/lib/python3/dist-packages/tofu/  the Python module (`import tofu` with
#                         PYTHONPATH=PREFIX/lib/python3/dist-packages, /usr/bin/python3)
#
#   tools/install.sh PREFIX           build and install (again: replaces what it installed)
#   tools/install.sh --no-setup PREFIX   without installing missing Debian packages first
#
# The tools find PREFIX/share/tofu/ops from their own location; nothing needs setting up.
# Idempotent: a second run leaves the same tree (files of earlier versions of the library
# in PREFIX/lib are removed).
set -euo pipefail
cd "$(dirname "$0")/.."

setup=1
prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-setup) setup=0 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *)
      if [ -n "$prefix" ]; then
        echo "install.sh: give one PREFIX (got '$prefix' and '$1')" >&2
        exit 2
      fi
      prefix="$1" ;;
  esac
  shift
done
if [ -z "$prefix" ]; then
  echo "install.sh: give the PREFIX to install into (see --help)" >&2
  exit 2
fi
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)

[ "$setup" = 1 ] && { tools/setup.sh || exit 1; }

version_part() { sed -n "s/^#define TOFU_VERSION_$1 \([0-9]*\)$/\1/p" include/tofu/tofu.h; }
major=$(version_part MAJOR)
minor=$(version_part MINOR)
patch=$(version_part PATCH)
if [ -z "$major" ] || [ -z "$minor" ] || [ -z "$patch" ]; then
  echo "install.sh: cannot read TOFU_VERSION_* from include/tofu/tofu.h" >&2
  exit 1
fi
version="$major.$minor.$patch"

echo "install.sh: building Tofu $version"
targets=(//tdlc:tdlc //tofu_plan:tofu-plan //tofu_run:tofu-run //:libtofu_plan.so //python:site)
if ! bazel build "${targets[@]}" >/tmp/tofu-install-build.$$ 2>&1; then
  tail -40 /tmp/tofu-install-build.$$ >&2
  rm -f /tmp/tofu-install-build.$$
  echo "install.sh: the build failed (above)" >&2
  exit 1
fi
rm -f /tmp/tofu-install-build.$$
bin=$(bazel info bazel-bin 2>/dev/null)

soname=$(readelf -d "$bin/libtofu_plan.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
if [ "$soname" != "libtofu_plan.so.$major" ]; then
  echo "install.sh: libtofu_plan.so's SONAME is '$soname', but tofu.h says version $version" \
       "(expected libtofu_plan.so.$major; see //:libtofu_plan.so in BUILD)" >&2
  exit 1
fi

echo "install.sh: installing into $prefix"
install -d "$prefix/bin" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/Tofu" "$prefix/include/tofu" \
  "$prefix/share/tofu"
install -m 755 "$bin/tdlc/tdlc" "$prefix/bin/tdlc"
install -m 755 "$bin/tofu_plan/tofu-plan" "$prefix/bin/tofu-plan"
install -m 755 "$bin/tofu_run/tofu-run" "$prefix/bin/tofu-run"
# The build with the CUDA backends, which tofu-run runs for --backend cuda and nccl.
install -m 755 "$bin/tofu_run/tofu-run-gpu" "$prefix/bin/tofu-run-gpu"

# The library, its SONAME link and the development link; older versions' files go.
find "$prefix/lib" -maxdepth 1 -name 'libtofu_plan.so*' ! -name "libtofu_plan.so.$version" -delete
install -m 755 "$bin/libtofu_plan.so" "$prefix/lib/libtofu_plan.so.$version"
ln -sfn "libtofu_plan.so.$version" "$prefix/lib/libtofu_plan.so.$major"
ln -sfn "libtofu_plan.so.$major" "$prefix/lib/libtofu_plan.so"

# The Python module: its package and its native part (whatever was there before goes).
py="$prefix/lib/python3/dist-packages/tofu"
rm -rf "$py"
install -d "$py"
install -m 644 "$bin"/python/site/tofu/*.py "$bin"/python/site/tofu/*.pyi \
  "$bin/python/site/tofu/py.typed" "$py/"
install -m 755 "$bin/python/site/tofu/_tofu.so" "$py/_tofu.so"

rm -rf "$prefix/include/tofu"
install -d "$prefix/include/tofu"
install -m 644 include/tofu/plan.h include/tofu/tofu.h "$prefix/include/tofu/"

rm -rf "$prefix/share/tofu/ops"
(cd ops && find . -name '*.tdl' -o -name 'onnx_mapping.json') | while read -r f; do
  install -D -m 644 "ops/$f" "$prefix/share/tofu/ops/$f"
done

cat >"$prefix/lib/pkgconfig/tofu.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: tofu
Description: Tofu's planning library: partition a DNN training graph across workers
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ltofu_plan
Cflags: -I\${includedir}
EOF

cat >"$prefix/lib/cmake/Tofu/TofuConfig.cmake" <<'EOF'
# Tofu's planning library for CMake: find_package(Tofu) gives the imported target Tofu::plan
# (libtofu_plan with include/tofu/plan.h and tofu.h; C++17 for the C++ API).
get_filename_component(_tofu_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET Tofu::plan)
  add_library(Tofu::plan SHARED IMPORTED)
  set_target_properties(Tofu::plan PROPERTIES
    IMPORTED_LOCATION "${_tofu_prefix}/lib/libtofu_plan.so.@VERSION@"
    IMPORTED_SONAME "libtofu_plan.so.@MAJOR@"
    INTERFACE_INCLUDE_DIRECTORIES "${_tofu_prefix}/include"
    INTERFACE_COMPILE_FEATURES cxx_std_17)
endif()
set(Tofu_INCLUDE_DIRS "${_tofu_prefix}/include")
set(Tofu_LIBRARIES Tofu::plan)
set(Tofu_OPS_DIR "${_tofu_prefix}/share/tofu/ops")
unset(_tofu_prefix)
EOF
sed -i "s/@VERSION@/$version/; s/@MAJOR@/$major/" "$prefix/lib/cmake/Tofu/TofuConfig.cmake"

cat >"$prefix/lib/cmake/Tofu/TofuConfigVersion.cmake" <<EOF
# Compatible within one major version, with any minor version at least the one asked for.
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION_MAJOR STREQUAL "$major" AND NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
EOF

echo "install.sh: installed Tofu $version:"
echo "  $prefix/bin/{tdlc,tofu-plan,tofu-run}"
echo "  $prefix/lib/libtofu_plan.so.$version (pkg-config tofu; CMake find_package(Tofu), Tofu::plan)"
echo "  $prefix/include/tofu/{plan.h,tofu.h}"
echo "  $prefix/share/tofu/ops ($(find "$prefix/share/tofu/ops" -name '*.tdl' | wc -l) .tdl files)"
