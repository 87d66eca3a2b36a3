#ifndef PEERSYNC_CEPOLL_SHIM_H
#define PEERSYNC_CEPOLL_SHIM_H
// Linux and glibc interfaces that Swift's Glibc module does not export: epoll (Reactor.swift)
// and malloc_trim (FreedMemory.swift). Only PeerSyncPosix imports this module
// (`internal import CEpoll`).
#include <sys/epoll.h>
#include <malloc.h>
#endif
