"""Share-partition state (KIP-932): which records of a partition a share group has
handed out, to whom, until when, and how often."""
