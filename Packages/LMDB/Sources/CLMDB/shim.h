#ifndef PEERSYNC_CLMDB_SHIM_H
#define PEERSYNC_CLMDB_SHIM_H
#include <lmdb.h>
#endif
