"""OpenTSDB-style server plugins for pytsd (see plugin/README.md)."""
