"""What pytsd tells about itself: counters and metrics shared by a server's workers, the
queries running and completed, and the state of the store. The API, the line protocol and the
server all report here; nothing here imports them."""
