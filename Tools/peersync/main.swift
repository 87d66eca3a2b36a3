print("peersync: not yet built")
