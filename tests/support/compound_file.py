"""A minimal writer of compound files (CFB / OLE2, version 3), enough to make Outlook .msg files for tests.

No Python package writes .msg files (or compound files from scratch), so the tests build them from the
format's specification ([MS-CFB]): 512-byte sectors, one FAT, streams under 4096 bytes in the mini stream,
a directory whose siblings form a (valid, all-black, right-leaning) tree. Storages are given as folders of a
path: {"__attach_version1.0_#00000000/__substg1.0_37010102": b"..."}.
"""

from __future__ import annotations

import struct

SECTOR = 512
MINI_SECTOR = 64
MINI_CUTOFF = 4096
FREE, END_OF_CHAIN, FAT_SECTOR, NO_STREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF
_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


class _Entry:
    def __init__(self, name: str, kind: int, data: bytes = b"") -> None:
        self.name, self.kind, self.data = name, kind, data  # kind: 1 storage, 2 stream, 5 root
        self.children: list[_Entry] = []
        self.index = 0
        self.start = END_OF_CHAIN
        self.right = NO_STREAM


def compound_file(streams: dict[str, bytes]) -> bytes:
    root = _tree(streams)
    entries = _flatten(root)
    mini_stream, mini_fat = _mini_stream([e for e in entries if e.kind == 2 and len(e.data) < MINI_CUTOFF])
    root.data = mini_stream
    big = [e for e in entries if (e.kind == 2 and len(e.data) >= MINI_CUTOFF) or (e.kind == 5 and e.data)]
    directory = b"".join(_directory_entry(e) for e in entries)
    return _layout(entries, big, directory, mini_fat)


def _tree(streams: dict[str, bytes]) -> _Entry:
    root = _Entry("Root Entry", 5)
    for path, data in streams.items():
        parent = root
        *folders, leaf = path.split("/")
        for folder in folders:
            found = next((c for c in parent.children if c.name == folder), None)
            if found is None:
                found = _Entry(folder, 1)
                parent.children.append(found)
            parent = found
        parent.children.append(_Entry(leaf, 2, data))
    return root


def _flatten(root: _Entry) -> list[_Entry]:
    entries = [root]
    pending = [root]
    while pending:
        entry = pending.pop(0)
        # Siblings sorted as the format compares names (length first, then upper-cased), chained to the right.
        kids = sorted(entry.children, key=lambda e: (len(e.name), e.name.upper()))
        for kid in kids:
            kid.index = len(entries)
            entries.append(kid)
            pending.append(kid)
        for kid, following in zip(kids, [*kids[1:], None], strict=False):
            kid.right = NO_STREAM if following is None else following.index
    return entries


def _mini_stream(small: list[_Entry]) -> tuple[bytes, list[int]]:
    data = b""
    fat: list[int] = []
    for entry in small:
        sectors = max(1, -(-len(entry.data) // MINI_SECTOR))
        entry.start = len(fat)
        fat.extend(range(len(fat) + 1, len(fat) + sectors))
        fat.append(END_OF_CHAIN)
        data += entry.data.ljust(sectors * MINI_SECTOR, b"\0")
    return data, fat


def _directory_entry(entry: _Entry) -> bytes:
    name = entry.name.encode("utf-16-le") + b"\0\0"
    child = entry.children and sorted(entry.children, key=lambda e: (len(e.name), e.name.upper()))[0].index
    return struct.pack(
        "<64sHBBIII16sIQQIII",
        name,
        len(name),
        entry.kind,
        1,  # black
        NO_STREAM,
        entry.right,
        child if entry.children else NO_STREAM,
        b"\0" * 16,
        0,
        0,
        0,
        entry.start if entry.kind != 1 else 0,
        len(entry.data),
        0,
    )


def _layout(entries: list[_Entry], big: list[_Entry], directory: bytes, mini_fat: list[int]) -> bytes:
    """Sectors: FAT, directory, mini FAT, then each big stream (the root's mini stream among them)."""
    chunks: list[tuple[str, bytes]] = [("dir", directory), ("minifat", struct.pack(f"<{len(mini_fat)}I", *mini_fat))]
    chunks += [(f"stream{e.index}", e.data) for e in big]
    counts = [max(1, -(-len(data) // SECTOR)) if data else 0 for _, data in chunks]
    data_sectors = sum(counts)
    fat_sectors = 1
    while fat_sectors * (SECTOR // 4) < fat_sectors + data_sectors:
        fat_sectors += 1
    fat = [FAT_SECTOR] * fat_sectors
    starts: dict[str, int] = {}
    for (label, _), count in zip(chunks, counts, strict=True):
        starts[label] = len(fat) if count else END_OF_CHAIN
        fat.extend(range(len(fat) + 1, len(fat) + count))
        if count:
            fat.append(END_OF_CHAIN)
    for entry in big:
        entry.start = starts[f"stream{entry.index}"]
    directory = b"".join(_directory_entry(e) for e in entries)  # again, now that big streams have their start
    chunks[0] = ("dir", directory)
    fat += [FREE] * (fat_sectors * (SECTOR // 4) - len(fat))
    header = _header(fat_sectors, starts["dir"], starts["minifat"], counts[1])
    body = struct.pack(f"<{len(fat)}I", *fat) + b"".join(
        data.ljust(count * SECTOR, b"\0") for (_, data), count in zip(chunks, counts, strict=True)
    )
    return header + body


def _header(fat_sectors: int, directory_start: int, mini_fat_start: int, mini_fat_sectors: int) -> bytes:
    difat = list(range(fat_sectors)) + [FREE] * (109 - fat_sectors)
    return struct.pack(
        "<8s16sHHHHH6sIIIIIIIII",
        _MAGIC,
        b"\0" * 16,
        0x3E,
        3,
        0xFFFE,
        9,
        6,
        b"\0" * 6,
        0,
        fat_sectors,
        directory_start,
        0,
        MINI_CUTOFF,
        mini_fat_start if mini_fat_sectors else END_OF_CHAIN,
        mini_fat_sectors,
        END_OF_CHAIN,
        0,
    ) + struct.pack("<109I", *difat)


def outlook_message(
    subject: str, sender: str, to: str, body: str, attachments: dict[str, bytes] | None = None
) -> bytes:
    """An Outlook .msg: the MAPI string properties as UTF-16 streams, attachments as their own storages."""
    streams = {
        "__properties_version1.0": b"\0" * 32,
        "__substg1.0_0037001F": subject.encode("utf-16-le"),
        "__substg1.0_0C1A001F": sender.encode("utf-16-le"),
        "__substg1.0_0E04001F": to.encode("utf-16-le"),
        "__substg1.0_1000001F": body.encode("utf-16-le"),
    }
    for number, (name, data) in enumerate((attachments or {}).items()):
        storage = f"__attach_version1.0_#{number:08X}"
        streams[f"{storage}/__properties_version1.0"] = b"\0" * 8
        streams[f"{storage}/__substg1.0_3707001F"] = name.encode("utf-16-le")
        streams[f"{storage}/__substg1.0_37010102"] = data
    return compound_file(streams)
