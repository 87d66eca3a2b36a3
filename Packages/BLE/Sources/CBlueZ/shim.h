// libbluetooth (BlueZ): HCI for LE advertising and scanning, L2CAP sockets for the data
// channel. Only PeerSyncBLE's BlueZ wrapper imports this module.
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>
#include <bluetooth/l2cap.h>
