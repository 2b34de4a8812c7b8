"""A JSON-lines source's files read by the driver (the graph pipeline's direct read) with the rows Spark reads.

Spark reads JSON one line at a time (blank lines skipped) in PERMISSIVE mode: a line that is not one object
whose values fit the declared types becomes a corrupt record, which the quarantine sets aside. The driver
reads a file with pyarrow only when it can vouch for the same rows: every column of a type whose JSON
values pyarrow and Spark convert alike (BIGINT, INT, DOUBLE, STRING, BOOLEAN: a value of another JSON
type, a fraction or an out-of-range number for an integer column, is an error in pyarrow and a corrupt
record in Spark), every non-blank line one object (it starts with ``{`` and ends with ``}``, and the file
gives as many rows as such lines), the text valid UTF-8. Otherwise (``None``) Spark reads the epoch's
files, so a malformed line is set aside exactly as before.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.json as pj

# JSON values pyarrow converts as Spark's JSON reader does, or refuses where Spark marks the row corrupt
ALIKE = (pa.int64(), pa.int32(), pa.float64(), pa.string(), pa.large_string(), pa.bool_())
_BLANK = b" \t\r\n"
COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst")  # Hadoop's codecs, by suffix


def readable(schema: pa.Schema) -> bool:
    """Whether the driver can read a JSON source of this schema (every column of a type read alike)."""
    return all(f.type in ALIKE for f in schema)


def local_file(logged: Path) -> Path:
    """A source file as the file log names it (Spark's log holds URIs, percent-encoded) as a local path."""
    return logged if logged.exists() else Path(unquote(str(logged)))


def read_json_lines(paths: list[Path], schema: pa.Schema) -> pa.Table | None:
    """The rows of JSON-lines files in the declared ``schema`` (columns by exact name, as Spark matches JSON
    fields; a missing one NULL, others ignored); None when a file holds a line Spark would set aside or that
    this reader cannot vouch for (see the module's doc): Spark reads them."""
    tables = []
    for logged in paths:
        data = local_file(logged).read_bytes()
        lines = [line for line in (raw.strip(_BLANK) for raw in data.splitlines()) if line]
        if not lines:
            continue
        if not all(line.startswith(b"{") and line.endswith(b"}") for line in lines):
            return None  # not one object per line: Spark's reading of it is not ours to guess
        options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        try:
            table = pj.read_json(pa.BufferReader(data), parse_options=options)
            table.validate(full=True)  # e.g. invalid UTF-8 in a string
        except (pa.ArrowInvalid, UnicodeDecodeError):
            return None
        if table.num_rows != len(lines):
            return None  # a line of several objects
        tables.append(table.select(schema.names).cast(schema))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def json_line_count(paths: list[Path]) -> int | None:
    """The non-blank lines of JSON-lines files: the rows Spark reads from them (malformed ones included);
    None for a compressed file (Spark decompresses it by its suffix)."""
    if any(Path(str(logged)).suffix.lower() in COMPRESSED for logged in paths):
        return None
    count = 0
    for logged in paths:
        with local_file(logged).open("rb") as f:
            count += sum(1 for line in f if line.strip(_BLANK))
    return count
