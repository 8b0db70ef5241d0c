"""The metadata image seen as a :class:`~stream_storage.wal_gc.StreamDirectory`.

Stream storage judges which dead brokers' WAL objects it may delete on the streams' epochs, owners
and end offsets and on which brokers are live; it gets them through this view so that it never
depends on the metadata quorum's image types.
"""
from __future__ import annotations

from dataclasses import dataclass

from metadata_quorum.image import MetadataImage
from metadata_quorum.records import STREAM_OPENED
from stream_storage.wal_objects import StreamView


@dataclass(frozen=True)
class ImageStreamDirectory:
    image: MetadataImage

    def live_brokers(self) -> set[int]:
        return {b for b, reg in self.image.cluster.brokers.items() if not reg.fenced}

    def stream_view(self, stream_id: int) -> StreamView | None:
        stream = self.image.streams.streams.get(stream_id)
        if stream is None:
            return None
        return StreamView(stream.epoch, stream.end_offset, stream.owner, stream.state == STREAM_OPENED,
                          frozenset(b for b, _e in stream.wal_owners))


def image_directory(image: MetadataImage | None) -> ImageStreamDirectory | None:
    return ImageStreamDirectory(image) if image is not None else None
