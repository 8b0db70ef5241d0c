"""The metadata quorum: records, the metadata image, controller operations and the Raft-backed controller process."""
