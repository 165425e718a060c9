"""The remote live view: a recording served over TCP (`memsight run --serve`) and received by
viewers (`memsight connect`, File → Connect… in the app). docs/protocol.md, "Live view
over the network"."""
