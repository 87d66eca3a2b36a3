#ifndef PEERSYNC_CZLIB_SHIM_H
#define PEERSYNC_CZLIB_SHIM_H
#include <zlib.h>

/* deflateInit2 / inflateInit2 are macros (they pass the zlib version and struct size). */
static inline int peersync_deflateInit2(z_streamp stream, int level, int windowBits, int memLevel) {
    return deflateInit2(stream, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}
static inline int peersync_inflateInit2(z_streamp stream, int windowBits) {
    return inflateInit2(stream, windowBits);
}
#endif
