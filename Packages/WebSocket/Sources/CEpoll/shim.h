#ifndef PEERSYNC_CEPOLL_SHIM_H
#define PEERSYNC_CEPOLL_SHIM_H
// Linux and glibc interfaces that Swift's Glibc module does not export: epoll and eventfd
// (the event loop), and malloc_trim (FreedMemory.swift). Only PeerSyncWebSocket imports this
// module (`internal import CEpoll`).
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <malloc.h>
#endif
