#ifndef PEERSYNC_CEPOLL_SHIM_H
#define PEERSYNC_CEPOLL_SHIM_H
// Linux kernel interfaces that Swift's Glibc module does not export: epoll and eventfd.
// Only PeerSyncWebSocket's event loop imports this module (`internal import CEpoll`).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
