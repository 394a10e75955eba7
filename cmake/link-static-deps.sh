#!/bin/bash
# Linker launcher for meshnode-proxy in optimized builds (CMake CXX_LINKER_LAUNCHER; see
# meshnode_link_static_deps in cmake/meshnode.cmake). Usage: link-static-deps.sh <link command...>
#
# Why: the proxy links ~60 shared libraries (gRPC, abseil, protobuf, OpenSSL, ...). Each one costs
# the process its symbol-lookup tables, relocated pages and the fault-around pages of its code,
# which made the file-backed part of the proxy's RSS 16.6 of 20.4 MB (bench/RESULTS.md, issue 15).
# Linked from the Debian static archives, only the objects the proxy uses come in, with no
# symbol lookup at start. libstdc++ links statically too (-static-libstdc++: fmt and spdlog are
# compiled into meshnode, so no shared library is left that needs libstdc++.so); libc, libm and
# libgcc_s stay shared. The executable stays position independent.
#
# Every argument of the form /dir/libX.so[.N...] or -lX whose archive /dir/libX.a exists is replaced
# by that archive inside one --start-group/--end-group (static archives need their own dependency
# order; the group resolves it). The shared libraries list only their direct dependencies, so the
# archives they depend on (abseil, upb, c-ares, re2, zlib, ...) are added from the same directory.
set -euo pipefail
keep_shared='^(stdc\+\+|gcc_s|c|m|dl|rt|pthread)$'
libdir=/usr/lib/x86_64-linux-gnu
args=() archives=()
for a in "$@"; do
  name=
  if [[ $a =~ ^(/.+)/lib([^/]+)\.so(\.[0-9.]+)?$ ]]; then
    libdir_a=${BASH_REMATCH[1]} name=${BASH_REMATCH[2]}
  elif [[ $a =~ ^-l(.+)$ ]]; then
    libdir_a=$libdir name=${BASH_REMATCH[1]}
  fi
  if [[ -n $name && ! $name =~ $keep_shared && -f $libdir_a/lib$name.a ]]; then
    archives+=("$libdir_a/lib$name.a")
  else
    args+=("$a")
  fi
done
if (( ${#archives[@]} )); then
  shopt -s nullglob
  archives+=("$libdir"/libabsl_*.a)
  for dep in upb gpr address_sorting cares re2 z; do
    [[ -f $libdir/lib$dep.a ]] && archives+=("$libdir/lib$dep.a")
  done
  args+=(-Wl,--start-group "${archives[@]}" -Wl,--end-group -ldl -lpthread -static-libstdc++)
fi
exec "${args[@]}"
