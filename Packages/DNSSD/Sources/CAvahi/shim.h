#ifndef PEERSYNC_CAVAHI_SHIM_H
#define PEERSYNC_CAVAHI_SHIM_H
/* libavahi-client through its D-Bus API, driven by a simple poll on a thread of our own
 * (PeerSyncDNSSD's Avahi/ folder is the only Swift code that calls these). */
#include <avahi-client/client.h>
#include <avahi-client/lookup.h>
#include <avahi-client/publish.h>
#include <avahi-common/address.h>
#include <avahi-common/alternative.h>
#include <avahi-common/defs.h>
#include <avahi-common/error.h>
#include <avahi-common/malloc.h>
#include <avahi-common/simple-watch.h>
#include <avahi-common/strlst.h>
#include <avahi-common/timeval.h>
#include <avahi-common/watch.h>
#include <net/if.h>

#endif
