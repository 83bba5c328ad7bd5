"""HBase's native RPC for the read path's scans (issue 27): the cells of a scan come back as
one ``KeyValueCodec`` cell block per call, decoded in bulk, instead of a Thrift ``TCell`` object
per cell that the Thrift1 gateway builds and serialises. Writes and everything else stay on
Thrift (``app.storage.hbase``).

Modules: ``wire`` (protobuf wire format of the few messages used), ``zk`` (the meta region's
server from ZooKeeper), ``rpc`` (one connection to a region server), ``cellblock`` (a cell
block as ``hbase_reply.ReplyRow`` rows), ``locate`` (a table's regions from ``hbase:meta``),
``scan`` (a key range read region by region).
"""
