# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of ``airflow_provider_mysqlcdc.cdc.binlog.row_decoder.PythonRowDecoder``.

It reads the same ``RowLayout`` (the kinds' codes below are that module's) and gives the same
values: integers, floats, UTF-8 text, bytes, DATE, DATETIME, TIMESTAMP and YEAR are decoded here;
every other kind's bytes go to the Python converter the layout names. Bytes that do not hold whole
rows raise ValueError rather than being read past.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.datetime cimport date_new, datetime_new, import_datetime
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

import datetime as _dt
from decimal import Decimal as _Decimal

import_datetime()

# the kinds of row_decoder.py
cdef enum:
    SIGNED = 1
    UNSIGNED = 2
    FLOAT = 3
    DOUBLE = 4
    UTF8 = 5
    BYTES = 6
    DATE = 7
    DATETIME = 8
    TIMESTAMP = 9
    YEAR = 10
    FIXED = 11
    PREFIXED = 12
    DECIMAL = 13

cdef object UTC = _dt.timezone.utc
cdef int64_t[7] POW10 = [1000000, 100000, 10000, 1000, 100, 10, 1]
cdef int[10] DIGITS_BYTES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]


cdef inline uint64_t little(const unsigned char* p, int width) noexcept nogil:
    cdef uint64_t value = 0
    cdef int i
    for i in range(width - 1, -1, -1):
        value = (value << 8) | p[i]
    return value


cdef inline uint64_t big(const unsigned char* p, int width) noexcept nogil:
    cdef uint64_t value = 0
    cdef int i
    for i in range(width):
        value = (value << 8) | p[i]
    return value


cdef inline void civil_from_days(int64_t days, int* year, int* month, int* day) noexcept nogil:
    """The proleptic Gregorian date ``days`` after 1970-01-01 (H. Hinnant's days_from_civil, inverted)."""
    days += 719468
    cdef int64_t era = (days if days >= 0 else days - 146096) // 146097
    cdef int64_t doe = days - era * 146097
    cdef int64_t yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    cdef int64_t doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    cdef int64_t mp = (5 * doy + 2) // 153
    day[0] = <int>(doy - (153 * mp + 2) // 5 + 1)
    month[0] = <int>(mp + 3 if mp < 10 else mp - 9)
    year[0] = <int>(yoe + era * 400 + (1 if month[0] <= 2 else 0))


cdef class RowDecoder:
    """Decodes the row images of one table map's layout."""

    cdef int count
    cdef int* kinds
    cdef int* widths
    cdef int* fsps
    cdef int* precisions
    cdef int* scales
    cdef tuple names
    cdef tuple converts

    def __cinit__(self, tuple names, tuple columns):
        if len(names) != len(columns):
            raise ValueError(f"{len(names)} names for {len(columns)} columns")
        self.count = len(columns)
        self.kinds = <int*>malloc(max(self.count, 1) * sizeof(int))
        self.widths = <int*>malloc(max(self.count, 1) * sizeof(int))
        self.fsps = <int*>malloc(max(self.count, 1) * sizeof(int))
        self.precisions = <int*>malloc(max(self.count, 1) * sizeof(int))
        self.scales = <int*>malloc(max(self.count, 1) * sizeof(int))
        if not self.kinds or not self.widths or not self.fsps or not self.precisions or not self.scales:
            raise MemoryError()
        self.names = names
        self.converts = tuple(c.convert for c in columns)
        cdef int i
        for i, column in enumerate(columns):
            self.kinds[i] = column.kind
            self.widths[i] = column.width
            self.fsps[i] = column.fsp
            self.precisions[i] = column.precision
            self.scales[i] = column.scale
            if not 1 <= column.kind <= 13 or column.width < 0 \
                    or (column.width > 8 and column.kind != FIXED and column.kind != DECIMAL) \
                    or not 0 <= column.fsp <= 6 or (column.kind == DECIMAL and not (
                        0 <= column.scale <= column.precision <= 65 and column.width == _decimal_bytes(column))):
                raise ValueError(f"column {names[i]!r}: a layout the decoder does not know: {column!r}")

    def __dealloc__(self):
        free(self.kinds)
        free(self.widths)
        free(self.fsps)
        free(self.precisions)
        free(self.scales)

    def decode(self, body):
        """Every row image in ``body``, in order, each a dict by column name (an update's before and
        after images alternate)."""
        return self._decode(body, False)

    def decode_values(self, body):
        """Every row image in ``body``, in order, each the list of its values in the layout's order
        (an update's before and after images alternate)."""
        return self._decode(body, True)

    cdef list _decode(self, body, bint by_values):
        cdef const unsigned char[::1] view = body
        cdef Py_ssize_t end = view.shape[0]
        if end == 0:
            return []
        cdef const unsigned char* data = &view[0]
        cdef Py_ssize_t at = 0, length
        cdef int i, kind, width, fsp, fraction_bytes, bitmap_bytes = (self.count + 7) // 8
        cdef const unsigned char* nulls
        cdef uint64_t raw
        cdef int64_t signed_value, micros, seconds
        cdef float f32
        cdef double f64
        cdef int year, month, day
        cdef list images = []
        cdef dict image = None
        cdef list values = None
        cdef object value
        cdef tuple names = self.names
        while at < end:
            if at + bitmap_bytes > end:
                raise ValueError("row event bytes end inside a NULL bitmap")
            nulls = data + at
            at += bitmap_bytes
            if by_values:
                values = []
            else:
                image = {}
            for i in range(self.count):
                if nulls[i >> 3] & (1 << (i & 7)):
                    value = None
                else:
                    kind, width = self.kinds[i], self.widths[i]
                    if at + width > end:
                        raise ValueError(f"row event bytes end inside column {names[i]!r}")
                    if kind == SIGNED:
                        raw = little(data + at, width)
                        if width < 8 and raw >> (8 * width - 1):
                            signed_value = <int64_t>raw - (<int64_t>1 << (8 * width))
                        else:
                            signed_value = <int64_t>raw
                        value = signed_value
                        at += width
                    elif kind == UNSIGNED:
                        value = little(data + at, width)
                        at += width
                    elif kind == UTF8 or kind == BYTES or kind == PREFIXED:
                        length = <Py_ssize_t>little(data + at, width)
                        at += width
                        if at + length > end:
                            raise ValueError(f"row event bytes end inside column {names[i]!r}")
                        if kind == UTF8:
                            value = PyUnicode_DecodeUTF8(<const char*>(data + at), length, "strict")
                        elif kind == BYTES:
                            value = PyBytes_FromStringAndSize(<const char*>(data + at), length)
                        else:
                            value = self.converts[i](PyBytes_FromStringAndSize(<const char*>(data + at), length))
                        at += length
                    elif kind == FLOAT:
                        memcpy(&f32, data + at, 4)
                        value = <double>f32
                        at += 4
                    elif kind == DOUBLE:
                        memcpy(&f64, data + at, 8)
                        value = f64
                        at += 8
                    elif kind == YEAR:
                        value = data[at] + 1900 if data[at] else 0
                        at += 1
                    elif kind == DATE:
                        raw = little(data + at, 3)
                        at += 3
                        day, month, year = raw & 0x1F, (raw >> 5) & 0x0F, raw >> 9
                        value = _date(year, month, day, self.converts[i])
                    elif kind == FIXED:
                        value = self.converts[i](PyBytes_FromStringAndSize(<const char*>(data + at), width))
                        at += width
                    elif kind == DECIMAL:
                        value = _decimal(data + at, width, self.precisions[i], self.scales[i])
                        at += width
                    else:  # DATETIME, TIMESTAMP: the fraction follows
                        fsp = self.fsps[i]
                        fraction_bytes = (fsp + 1) // 2
                        if at + width + fraction_bytes > end:
                            raise ValueError(f"row event bytes end inside column {names[i]!r}")
                        raw = big(data + at, width)
                        micros = <int64_t>big(data + at + width, fraction_bytes)
                        at += width + fraction_bytes
                        if fsp % 2:
                            micros //= 10
                        micros *= POW10[fsp]
                        if kind == DATETIME:
                            value = _datetime(raw, <int>micros, self.converts[i])
                        else:
                            seconds = <int64_t>raw
                            if seconds == 0 and micros == 0:  # the zero TIMESTAMP: None, or its text in a key
                                value = None if self.converts[i] is None else self.converts[i](0, 0, 0)
                            else:
                                civil_from_days(seconds // 86400, &year, &month, &day)
                                seconds %= 86400
                                value = datetime_new(year, month, day, <int>(seconds // 3600),
                                                     <int>(seconds // 60 % 60), <int>(seconds % 60),
                                                     <int>micros, UTC)
                if by_values:
                    values.append(value)
                else:
                    image[names[i]] = value
            images.append(values if by_values else image)
        return images


cdef object _date(int year, int month, int day, object zero):
    try:
        return date_new(year, month, day)
    except ValueError:
        # the zero date, a date with a zero part, or an impossible one (ALLOW_INVALID_DATES): None, or
        # in a key column its text (``zero``: values.zero_date_text)
        return None if zero is None else zero(year, month, day)


cdef object _datetime(uint64_t packed, int micros, object zero):
    cdef int year_month = (packed >> 22) & 0x1FFFF
    cdef int year = year_month // 13, month = year_month % 13, day = (packed >> 17) & 0x1F
    cdef int hour = (packed >> 12) & 0x1F, minute = (packed >> 6) & 0x3F, second = packed & 0x3F
    try:
        return datetime_new(year, month, day, hour, minute, second, micros, None)
    except ValueError:  # the zero date, or a date with a zero part: as _date
        return None if zero is None else zero(year, month, day, hour, minute, second, micros)


def _decimal_bytes(column) -> int:
    whole = column.precision - column.scale
    return (whole // 9) * 4 + DIGITS_BYTES[whole % 9] + (column.scale // 9) * 4 + DIGITS_BYTES[column.scale % 9]


cdef inline uint64_t _pow10(int n) noexcept nogil:
    cdef uint64_t value = 1
    for _ in range(n):
        value *= 10
    return value


cdef object _decimal(const unsigned char* raw, int width, int precision, int scale):
    """MySQL's binary DECIMAL (row_decoder._decimal_reader tells the layout) as the Decimal of its
    text, which has exactly ``scale`` places."""
    cdef unsigned char data[32]
    cdef char text[80]
    cdef int whole = precision - scale, i, g, size, digits, at = 0, n = 0, groups
    cdef bint negative = not (raw[0] & 0x80)
    cdef uint64_t value
    cdef int[16] group_digits
    memcpy(data, raw, width)
    data[0] ^= 0x80
    if negative:
        for i in range(width):
            data[i] ^= 0xFF
        text[n] = 45  # '-'
        n += 1
    groups = 0
    if whole % 9:
        group_digits[groups] = whole % 9
        groups += 1
    for i in range(whole // 9):
        group_digits[groups] = 9
        groups += 1
    cdef int whole_groups = groups
    for i in range(scale // 9):
        group_digits[groups] = 9
        groups += 1
    if scale % 9:
        group_digits[groups] = scale % 9
        groups += 1
    if whole == 0:
        text[n] = 48  # '0'
        n += 1
    for g in range(groups):
        if g == whole_groups:
            text[n] = 46  # '.'
            n += 1
        digits = group_digits[g]
        size = DIGITS_BYTES[digits]
        value = big(data + at, size)
        at += size
        if value >= <uint64_t>POW10[0] * 1000 or (digits < 9 and value >= <uint64_t>_pow10(digits)):
            raise ValueError(f"a DECIMAL({precision},{scale}) group holds {value}, more than {digits} digits")
        for i in range(digits - 1, -1, -1):
            text[n + i] = 48 + <char>(value % 10)
            value //= 10
        n += digits
    if whole_groups == groups:
        text[n] = 46  # '.' with nothing after it: no places
        n += 1
    return _Decimal(text[:n].decode("ascii"))


# --- framing: a dump's packets cut into events (the compiled twin of dump.cut_events) --------------

#: why ``cut_events`` stopped: the buffer ends inside a packet, or the next packet is not one whole
#: event (a continued event, the end of a non-blocking dump, an error: read packet by packet)
NEED_BYTES = 0
NOT_ONE_EVENT = 1


def cut_events(const unsigned char[:] buffer, Py_ssize_t at, int checksum_bytes, const unsigned char[:] wanted,
               object event_class):
    """The events of the whole packets in ``buffer`` from ``at`` whose type ``wanted`` marks, each an
    ``event_class`` of (type, timestamp, server id, size, end position, flags, body); the offset
    after the last packet cut; and why the cut stopped (``NEED_BYTES`` or ``NOT_ONE_EVENT``)."""
    if wanted.shape[0] != 256:
        raise ValueError(f"wanted must mark each of the 256 event types, not {wanted.shape[0]}")
    cdef Py_ssize_t end = buffer.shape[0], length, body_length
    cdef const unsigned char* p
    cdef list found = []
    cdef int stop
    cdef unsigned char kind
    while True:
        if end - at < 4:
            stop = NEED_BYTES
            break
        p = &buffer[at]
        length = p[0] | p[1] << 8 | p[2] << 16
        if length == 0xFFFFFF or length < 20 + checksum_bytes:
            stop = NOT_ONE_EVENT
            break
        if end - at < 4 + length:
            stop = NEED_BYTES
            break
        if p[4] != 0:
            stop = NOT_ONE_EVENT
            break
        kind = p[9]
        if wanted[kind]:
            body_length = length - 20 - checksum_bytes
            found.append(tuple.__new__(event_class, (
                kind, <unsigned int>little(p + 5, 4), <unsigned int>little(p + 10, 4),
                <unsigned int>little(p + 14, 4), <unsigned int>little(p + 18, 4), <unsigned int>little(p + 22, 2),
                PyBytes_FromStringAndSize(<const char*>(p + 24), body_length))))
        at += 4 + length
    return found, at, stop
