"""Pure scheduling: given a snapshot of nodes and a request, choose devices. No I/O, no clock."""
