#!/usr/bin/env bash
# Run HERE (the development machine), not on the H200: copies the Debian dev packages the H200 image
# lacks (pcre2, utf8proc, cpp-httplib; with --all also nlohmann-json, CLI11, fmt, gtest, pkgconf,
# libssl, zlib) into .devdeps/
# with the /usr layout kept, so that their CMake configs and .pc files resolve relative to it. The H200 image
# has cmake, ninja and nvcc but not these; run_all.sh uses .devdeps/ when the system lacks them.
# .devdeps/ is ignored (.git/info/exclude) and travels with the device call's `carry`. Re-run after
# committing (with --head), so that .devdeps/head.tar.xz holds the latest committed sources.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
dst=.devdeps/usr
arch=x86_64-linux-gnu
rm -rf .devdeps
mkdir -p "$dst/include" "$dst/lib/$arch/pkgconfig" .devdeps/bin
# Seen missing on the H200 image (2026-11-29): pcre2 and utf8proc. --all packs every dependency.
cp /usr/include/{pcre2.h,utf8proc.h} "$dst/include/"
cp -P /usr/lib/$arch/libpcre2-8.so* /usr/lib/$arch/libutf8proc.so* "$dst/lib/$arch/"
cp /usr/lib/$arch/pkgconfig/{libpcre2-8,libutf8proc}.pc "$dst/lib/$arch/pkgconfig/"
# cpp-httplib (tandem serve): Debian ships it compiled (libcpp-httplib.so) with a pkg-config file
# whose Cflags carry the macros it was built with (OpenSSL, zlib, brotli support), so httplib.h
# includes those headers and pkg-config wants their .pc files. The runtime libssl3 and zlib are
# taken from the image (its Python links them); --all packs them too. Brotli's libraries are small.
cp /usr/include/httplib.h /usr/include/{zlib.h,zconf.h} "$dst/include/"
cp -r /usr/include/openssl /usr/include/brotli "$dst/include/"
cp /usr/include/$arch/openssl/*.h "$dst/include/openssl/"  # configuration.h, opensslconf.h
cp -P /usr/lib/$arch/libcpp-httplib.so* /usr/lib/$arch/libbrotli*.so* "$dst/lib/$arch/"
cp /usr/lib/$arch/pkgconfig/{cpp-httplib,openssl,libssl,libcrypto,zlib}.pc \
   /usr/lib/$arch/pkgconfig/libbrotli{common,dec,enc}.pc "$dst/lib/$arch/pkgconfig/"
# ICU: a declaration-only stand-in (icu_shim/uchar.h says why), never the 30 MB data library.
mkdir -p "$dst/include/unicode"
cp scripts/device/icu_shim/uchar.h "$dst/include/unicode/uchar.h"
gcc -shared -fPIC -I"$dst/include" scripts/device/icu_shim/uchar_shim.c -o "$dst/lib/$arch/libicuuc.so"
printf 'prefix=/usr\nlibdir=${prefix}/lib/%s\nincludedir=${prefix}/include\n\nName: icu-uc\nDescription: ICU stand-in for device builds\nVersion: 72.1\nLibs: -L${libdir} -licuuc\nCflags: -I${includedir}\n' \
  "$arch" > "$dst/lib/$arch/pkgconfig/icu-uc.pc"
if [[ " $* " == *" --all "* ]]; then
  mkdir -p "$dst/lib/$arch/cmake" "$dst/share/cmake"
  cp -r /usr/include/{nlohmann,CLI,fmt,gtest} "$dst/include/"
  cp -P /usr/lib/$arch/libfmt.so* /usr/lib/$arch/libgtest*.a /usr/lib/$arch/libgmock*.a \
        /usr/lib/$arch/libpkgconf.so* /usr/lib/$arch/libssl.so* /usr/lib/$arch/libcrypto.so* \
        /usr/lib/$arch/libz.so* "$dst/lib/$arch/"
  cp -r /usr/lib/$arch/cmake/{fmt,GTest} "$dst/lib/$arch/cmake/"
  cp -r /usr/share/cmake/{CLI11,nlohmann_json} "$dst/share/cmake/"
  cp /usr/lib/$arch/pkgconfig/fmt.pc "$dst/lib/$arch/pkgconfig/"
  cp /usr/bin/pkgconf .devdeps/bin/pkgconf
fi
# With --head: the committed sources the CUDA suite needs, for run_all.sh to fall back on when work
# in progress elsewhere in the working tree does not compile (the device copy has no .git).
# Packed (head.tar.xz, ~0.9 MB); off by default since 2026-12-07: beside the ~61.8 MiB tracked
# tree it took the call over its 64 MiB.
if [[ " $* " == *" --head "* ]]; then
  git archive --prefix=head/ HEAD CMakeLists.txt src apps bench tests/CMakeLists.txt \
    tests/test_support.h tests/cuda | xz -9 > .devdeps/head.tar.xz
fi
# Packed: the tracked tree is ~61.6 MiB of the device call's 64 (devdeps_env.sh unpacks it there).
tar -cJf .devdeps/usr.tar.xz -C .devdeps usr && rm -rf .devdeps/usr
du -sh .devdeps
