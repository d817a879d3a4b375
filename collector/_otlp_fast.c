/*
 * collector._otlp_fast: a compiled decoder for the usual OTLP trace request.
 *
 * decode(body, traces, reject, new_span, new_event, kinds, codes, max_depth, max_value) walks the
 * protobuf wire format of an ExportTraceServiceRequest (or TracesData) and appends one
 * collector.model.Span per accepted span to traces[hex trace id] (a dict of lists, in
 * first-seen order), exactly as collector.otlp's Python decoder would build it. Spans with
 * unacceptable ids are passed to reject(trace_id, span_id, parent_span_id) (raw bytes).
 *
 * String and bytes attribute values longer than max_value bytes are cut to it (strings on a
 * character boundary), as collector.otlp.truncate_text/truncate_bytes do.
 * It returns the number of values cut (>= 0) when it decoded the whole body, and -1 when the body holds anything
 * out of the ordinary: malformed wire data, text that is not UTF-8, group wire types, a
 * known field with an unexpected wire type, a singular message field given twice (protobuf
 * merges those), several members of the AnyValue oneof, nesting at MAX_DEPTH, the
 * string_value_strindex member. The caller then throws away what was appended and decodes
 * the body with the Python decoder, which owns every edge case (and the error messages).
 * So this file only has to be right about well-formed, ordinary bodies, and it is checked
 * against the Python decoder by property tests (tests/collector/test_otlp_fast.py).
 *
 * Field numbers: opentelemetry/proto/trace/v1/trace.proto and common/v1/common.proto.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define OK 0
#define ERR (-1)    /* a Python exception is set */
#define ODD 1       /* out of the ordinary: let the Python decoder handle the body */

#define CHECK(expr) do { int rc_ = (expr); if (rc_ != OK) return rc_; } while (0)

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

typedef struct {
    uint32_t field;
    int wire;
    uint64_t num;          /* varint, fixed64 and fixed32 values */
    const uint8_t *data;   /* length-delimited values */
    Py_ssize_t len;
} Field;

typedef struct {
    PyObject *traces;      /* dict: hex trace id -> list of spans */
    PyObject *reject;      /* callable(trace_id, span_id, parent_id) */
    PyObject *new_span;    /* positional Span constructor (13 fields) */
    PyObject *new_event;   /* SpanEvent(name, time_ns, attributes) */
    PyObject *kinds;       /* dict: int -> SpanKind */
    PyObject *codes;       /* dict: int -> StatusCode */
    PyObject *kind_default;
    PyObject *code_default;
    PyObject *empty_tuple;
    PyObject *ids;         /* dict: hex id -> itself, one str per distinct id in this body */
    long max_depth;
    Py_ssize_t max_value;  /* string/bytes attribute values are cut to this many bytes */
    Py_ssize_t truncated;  /* values cut so far */
} Ctx;

static int
read_varint(Reader *r, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return OK;
        }
    }
    return ODD;
}

/* Read the next field of a message. Returns OK, or ODD for anything malformed or unusual. */
static int
next_field(Reader *r, Field *f)
{
    uint64_t tag, len;
    const uint8_t *start = r->p;
    CHECK(read_varint(r, &tag));
    f->field = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    /* protobuf reads a tag in at most 5 bytes: a longer (over-long) encoding is corrupt there */
    if (f->field == 0 || (tag >> 3) > 0x1FFFFFFF || r->p - start > 5)
        return ODD;
    switch (f->wire) {
    case 0:
        return read_varint(r, &f->num);
    case 1:
        if (r->end - r->p < 8)
            return ODD;
        f->num = 0;
        for (int i = 7; i >= 0; i--)
            f->num = (f->num << 8) | r->p[i];
        r->p += 8;
        return OK;
    case 2:
        CHECK(read_varint(r, &len));
        if (len > (uint64_t)(r->end - r->p))
            return ODD;
        f->data = r->p;
        f->len = (Py_ssize_t)len;
        r->p += len;
        return OK;
    case 5:
        if (r->end - r->p < 4)
            return ODD;
        f->num = (uint64_t)r->p[0] | ((uint64_t)r->p[1] << 8) | ((uint64_t)r->p[2] << 16) | ((uint64_t)r->p[3] << 24);
        r->p += 4;
        return OK;
    default:
        return ODD; /* groups (3, 4) and invalid wire types */
    }
}

static inline Reader
sub(const Field *f)
{
    Reader r = {f->data, f->data + f->len};
    return r;
}

/* UTF-8 text of a field; NULL with no exception set means "not UTF-8" (ODD). */
static PyObject *
text(const uint8_t *data, Py_ssize_t len)
{
    PyObject *s = PyUnicode_DecodeUTF8((const char *)data, len, NULL);
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        PyErr_Clear();
    return s;
}


/* 1 when an earlier copy of a repeated text field (or none: NULL) is UTF-8. protobuf checks every
 * copy while the decoder keeps the last: an earlier bad copy hands the body back (ODD). */
static int
earlier_utf8(const uint8_t *data, Py_ssize_t len)
{
    if (data == NULL || len == 0)
        return 1;
    PyObject *s = text(data, len);
    if (s == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(s);
    return 1;
}

/* A cache of short texts (attribute keys and short string values repeat across spans:
 * operation names, models, systems, finish reasons). A hit returns the same str object
 * (keys interned, so the normaliser's look-ups by constant compare by identity) with its
 * hash already computed, instead of decoding, allocating and hashing a new one. Direct
 * mapped, 4,096 entries of at most 48 bytes; a collision replaces the entry. */
#define CACHE_SIZE 4096
#define CACHE_MAX_LEN 48

typedef struct {
    Py_ssize_t len;
    uint8_t bytes[CACHE_MAX_LEN];
    PyObject *str;
} CacheEntry;

static CacheEntry cache[CACHE_SIZE];

static PyObject *
cached_text(const uint8_t *data, Py_ssize_t len, int intern)
{
    if (len > CACHE_MAX_LEN || len == 0)
        return text(data, len);
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < len; i++)
        h = (h ^ data[i]) * 16777619u;
    h ^= (uint32_t)intern;
    CacheEntry *e = &cache[(h ^ (h >> 16)) & (CACHE_SIZE - 1)];
    if (e->str != NULL && e->len == len && memcmp(e->bytes, data, (size_t)len) == 0) {
        Py_INCREF(e->str);
        return e->str;
    }
    PyObject *s = text(data, len);
    if (s == NULL)
        return NULL;
    if (intern)
        PyUnicode_InternInPlace(&s);
    (void)PyObject_Hash(s); /* computed once, kept in the object */
    Py_INCREF(s);
    Py_XSETREF(e->str, s);
    e->len = len;
    memcpy(e->bytes, data, (size_t)len);
    return s;
}

#define TEXT_OR_FAIL(out, data, len) do { \
        (out) = text((data), (len)); \
        if ((out) == NULL) return PyErr_Occurred() ? ERR : ODD; \
    } while (0)

static PyObject *
hex(const uint8_t *data, Py_ssize_t len)
{
    static const char digits[] = "0123456789abcdef";
    PyObject *s = PyUnicode_New(len * 2, 127);
    if (s == NULL)
        return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(s);
    for (Py_ssize_t i = 0; i < len; i++) {
        out[2 * i] = (Py_UCS1)digits[data[i] >> 4];
        out[2 * i + 1] = (Py_UCS1)digits[data[i] & 15];
    }
    return s;
}

/* The hex form of an id, one str object per distinct id in the body: the spans of a trace
 * (interleaved with other traces' in a batch) share their trace id, siblings share their parent's
 * id and a parent's own span id is the one its children carry (~200 bytes a span less held). */
static PyObject *
shared_hex(PyObject *ids, const uint8_t *data, Py_ssize_t len)
{
    PyObject *s = hex(data, len);
    if (s == NULL)
        return NULL;
    PyObject *found = PyDict_SetDefault(ids, s, s); /* borrowed */
    if (found == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    Py_INCREF(found);
    Py_DECREF(s);
    return found;
}

static int attributes_into(Ctx *c, PyObject *dict, const Field *f, long depth);

/* Length of the longest prefix of UTF-8 data[0:len] of at most max bytes ending on a character
 * boundary (a character cut by max is left out whole). */
static Py_ssize_t
utf8_prefix(const uint8_t *data, Py_ssize_t len, Py_ssize_t max)
{
    if (len <= max)
        return len;
    Py_ssize_t n = max;
    while (n > 0 && (data[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* A string value over c->max_value bytes: the whole is checked to be UTF-8 (as the Python
 * decoder does), then its prefix (utf8_prefix) is kept. NULL without an exception: not UTF-8. */
static PyObject *
cut_text(Ctx *c, const uint8_t *data, Py_ssize_t len)
{
    PyObject *whole = text(data, len);
    if (whole == NULL)
        return NULL;
    Py_DECREF(whole);
    c->truncated++;
    return text(data, utf8_prefix(data, len, c->max_value));
}

/* AnyValue -> Python value (new reference in *out). */
static int
any_value(Ctx *c, const uint8_t *data, Py_ssize_t len, long depth, PyObject **out)
{
    Reader r = {data, data + len};
    Field f;
    int members = 0;
    PyObject *value = NULL;
    while (r.p < r.end) {
        int rc = next_field(&r, &f);
        if (rc != OK)
            goto odd;
        if (f.field > 8)
            continue; /* unknown field */
        if (++members > 1 || f.field == 8)
            goto odd; /* oneof given twice (last wins, messages merge) or string_value_strindex */
        switch (f.field) {
        case 1: /* string_value */
        case 7: /* bytes_value */
            if (f.wire != 2)
                goto odd;
            if (f.field == 1) {
                value = f.len > c->max_value ? cut_text(c, f.data, f.len) : cached_text(f.data, f.len, 0);
                if (value == NULL)
                    return PyErr_Occurred() ? ERR : ODD;
            } else {
                Py_ssize_t n = f.len;
                if (n > c->max_value) {
                    n = c->max_value;
                    c->truncated++;
                }
                if ((value = PyBytes_FromStringAndSize((const char *)f.data, n)) == NULL)
                    return ERR;
            }
            break;
        case 2: /* bool_value */
            if (f.wire != 0)
                goto odd;
            value = PyBool_FromLong(f.num != 0);
            break;
        case 3: /* int_value */
            if (f.wire != 0)
                goto odd;
            if ((value = PyLong_FromLongLong((long long)(int64_t)f.num)) == NULL)
                return ERR;
            break;
        case 4: /* double_value */
            if (f.wire != 1)
                goto odd;
            {
                double d;
                memcpy(&d, &f.num, sizeof d); /* little-endian assembled above */
                if ((value = PyFloat_FromDouble(d)) == NULL)
                    return ERR;
            }
            break;
        case 5: /* array_value: ArrayValue { repeated AnyValue values = 1; } */
        case 6: /* kvlist_value: KeyValueList { repeated KeyValue values = 1; } */
            if (f.wire != 2 || depth >= c->max_depth)
                goto odd;
            if (f.field == 5) {
                if ((value = PyList_New(0)) == NULL)
                    return ERR;
                Reader ar = sub(&f);
                Field af;
                while (ar.p < ar.end) {
                    PyObject *item;
                    int irc = next_field(&ar, &af);
                    if (irc == OK && af.field == 1 && af.wire != 2)
                        irc = ODD;
                    if (irc == OK && af.field == 1) {
                        irc = any_value(c, af.data, af.len, depth + 1, &item);
                        if (irc == OK) {
                            irc = PyList_Append(value, item) ? ERR : OK;
                            Py_DECREF(item);
                        }
                    }
                    if (irc != OK) {
                        Py_DECREF(value);
                        return irc;
                    }
                }
            } else {
                if ((value = PyDict_New()) == NULL)
                    return ERR;
                int krc = attributes_into(c, value, &f, depth + 1);
                if (krc != OK) {
                    Py_DECREF(value);
                    return krc;
                }
            }
            break;
        }
    }
    if (value == NULL) {
        value = Py_None; /* unset */
        Py_INCREF(value);
    }
    *out = value;
    return OK;
odd:
    Py_XDECREF(value);
    return ODD;
}

/* One KeyValue into dict (later duplicates win). */
static int
key_value_into(Ctx *c, PyObject *dict, const uint8_t *data, Py_ssize_t len, long depth)
{
    Reader r = {data, data + len};
    Field f;
    const uint8_t *key = (const uint8_t *)"";
    Py_ssize_t key_len = 0;
    const uint8_t *val = NULL;
    Py_ssize_t val_len = 0;
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        if (f.field == 1) {
            if (f.wire != 2 || !earlier_utf8(key, key_len))
                return ODD;
            key = f.data;
            key_len = f.len;
        } else if (f.field == 2) {
            if (f.wire != 2 || val != NULL)
                return ODD; /* a message given twice is merged by protobuf */
            val = f.data;
            val_len = f.len;
        }
    }
    PyObject *k, *v;
    k = cached_text(key, key_len, 1);
    if (k == NULL)
        return PyErr_Occurred() ? ERR : ODD;
    if (val == NULL) {
        v = Py_None;
        Py_INCREF(v);
    } else {
        int rc = any_value(c, val, val_len, depth, &v);
        if (rc != OK) {
            Py_DECREF(k);
            return rc;
        }
    }
    int rc = PyDict_SetItem(dict, k, v) ? ERR : OK;
    Py_DECREF(k);
    Py_DECREF(v);
    return rc;
}

/* The repeated KeyValue field 1 of a message (KeyValueList, Resource). */
static int
attributes_into(Ctx *c, PyObject *dict, const Field *msg, long depth)
{
    Reader r = sub(msg);
    Field f;
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        if (f.field == 1) {
            if (f.wire != 2)
                return ODD;
            CHECK(key_value_into(c, dict, f.data, f.len, depth));
        }
    }
    return OK;
}

/* Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; } */
static int
event(Ctx *c, const Field *msg, PyObject **out)
{
    Reader r = sub(msg);
    Field f;
    uint64_t time_ns = 0;
    const uint8_t *name = (const uint8_t *)"";
    Py_ssize_t name_len = 0;
    PyObject *attrs = PyDict_New();
    if (attrs == NULL)
        return ERR;
    int rc = OK;
    while (rc == OK && r.p < r.end) {
        rc = next_field(&r, &f);
        if (rc != OK)
            break;
        if (f.field == 1) {
            if (f.wire != 1)
                rc = ODD;
            time_ns = f.num;
        } else if (f.field == 2) {
            if (f.wire != 2 || !earlier_utf8(name, name_len))
                rc = ODD;
            name = f.data;
            name_len = f.len;
        } else if (f.field == 3) {
            rc = f.wire != 2 ? ODD : key_value_into(c, attrs, f.data, f.len, 0);
        }
    }
    if (rc != OK) {
        Py_DECREF(attrs);
        return rc;
    }
    PyObject *n = text(name, name_len);
    if (n == NULL) {
        Py_DECREF(attrs);
        return PyErr_Occurred() ? ERR : ODD;
    }
    PyObject *t = PyLong_FromUnsignedLongLong(time_ns);
    if (t == NULL) {
        Py_DECREF(n);
        Py_DECREF(attrs);
        return ERR;
    }
    PyObject *args[3] = {n, t, attrs};
    *out = PyObject_Vectorcall(c->new_event, args, 3, NULL);
    Py_DECREF(n);
    Py_DECREF(t);
    Py_DECREF(attrs);
    return *out == NULL ? ERR : OK;
}

static int
lookup(PyObject *table, int32_t number, PyObject *fallback, PyObject **out)
{
    PyObject *key = PyLong_FromLong(number);
    if (key == NULL)
        return ERR;
    PyObject *found = PyDict_GetItemWithError(table, key);
    Py_DECREF(key);
    if (found == NULL && PyErr_Occurred())
        return ERR;
    *out = found ? found : fallback;
    return OK;
}

typedef struct {
    uint8_t trace_id[16];
    int have_trace;
    PyObject *hex;  /* owned: the hex form of trace_id */
    PyObject *list; /* borrowed from ctx->traces */
} TraceCursor;

/* Span (field numbers of trace.proto). Appends to the trace's list, or calls reject. */
static int
span(Ctx *c, const Field *msg, PyObject *resource, PyObject *scope, TraceCursor *cur)
{
    Reader r = sub(msg);
    Field f;
    const uint8_t *trace_id = NULL, *span_id = NULL, *parent_id = NULL, *name = NULL;
    Py_ssize_t trace_len = 0, span_len = 0, parent_len = 0, name_len = 0;
    const uint8_t *status = NULL;
    Py_ssize_t status_len = 0;
    uint64_t kind = 0, start = 0, end = 0;
    int rc = OK;
    Py_ssize_t truncated_before = c->truncated; /* a rejected span's cut values were never held */
    PyObject *attrs = PyDict_New(), *events = NULL;
    if (attrs == NULL)
        return ERR;
    while (rc == OK && r.p < r.end) {
        rc = next_field(&r, &f);
        if (rc != OK)
            break;
        switch (f.field) {
        case 1: case 2: case 4: case 5: case 15:
            if (f.wire != 2) {
                rc = ODD;
                break;
            }
            if (f.field == 1) { trace_id = f.data; trace_len = f.len; }
            else if (f.field == 2) { span_id = f.data; span_len = f.len; }
            else if (f.field == 4) { parent_id = f.data; parent_len = f.len; }
            else if (f.field == 5) {
                if (!earlier_utf8(name, name_len)) {
                    rc = ODD;
                    break;
                }
                name = f.data;
                name_len = f.len;
            }
            else {
                if (status != NULL)
                    rc = ODD; /* merged by protobuf */
                status = f.data;
                status_len = f.len;
            }
            break;
        case 6:
            if (f.wire != 0)
                rc = ODD;
            kind = f.num;
            break;
        case 7: case 8:
            if (f.wire != 1)
                rc = ODD;
            else if (f.field == 7)
                start = f.num;
            else
                end = f.num;
            break;
        case 9:
            rc = f.wire != 2 ? ODD : key_value_into(c, attrs, f.data, f.len, 0);
            break;
        case 11:
            if (f.wire != 2) {
                rc = ODD;
                break;
            }
            {
                PyObject *ev;
                rc = event(c, &f, &ev);
                if (rc != OK)
                    break;
                if (events == NULL && (events = PyList_New(0)) == NULL) {
                    Py_DECREF(ev);
                    rc = ERR;
                    break;
                }
                rc = PyList_Append(events, ev) ? ERR : OK;
                Py_DECREF(ev);
            }
            break;
        default:
            break; /* unknown or unread field */
        }
    }
    PyObject *tid = NULL, *sid = NULL, *pid = NULL, *nm = NULL, *msgtext = NULL, *ev_tuple = NULL;
    PyObject *start_o = NULL, *end_o = NULL, *span_obj = NULL;
    int32_t status_code = 0;
    const uint8_t *status_msg = (const uint8_t *)"";
    Py_ssize_t status_msg_len = 0;
    if (rc != OK)
        goto done;
    if (status != NULL) {
        Reader sr = {status, status + status_len};
        Field sf;
        while (rc == OK && sr.p < sr.end) {
            rc = next_field(&sr, &sf);
            if (rc != OK)
                break;
            if (sf.field == 2) {
                if (sf.wire != 2 || !earlier_utf8(status_msg, status_msg_len))
                    rc = ODD; /* protobuf checks every copy of a repeated text field, not only the last */
                status_msg = sf.data;
                status_msg_len = sf.len;
            } else if (sf.field == 3) {
                if (sf.wire != 0)
                    rc = ODD;
                status_code = (int32_t)(uint32_t)sf.num;
            }
        }
        if (rc != OK)
            goto done;
    }
    /* Texts first: protobuf rejects a body with bad UTF-8 in them even for spans with bad ids. */
    nm = cached_text(name ? name : (const uint8_t *)"", name_len, 0); /* span names repeat */
    if (nm == NULL) {
        rc = PyErr_Occurred() ? ERR : ODD;
        goto done;
    }
    msgtext = text(status_msg, status_msg_len);
    if (msgtext == NULL) {
        rc = PyErr_Occurred() ? ERR : ODD;
        goto done;
    }
    static const uint8_t zeros[16] = {0};
    if (trace_len != 16 || span_len != 8 || memcmp(trace_id, zeros, 16) == 0 || memcmp(span_id, zeros, 8) == 0
        || (parent_len != 0 && parent_len != 8)) {
        PyObject *t = PyBytes_FromStringAndSize((const char *)trace_id, trace_len);
        PyObject *s = PyBytes_FromStringAndSize((const char *)span_id, span_len);
        PyObject *p = PyBytes_FromStringAndSize((const char *)parent_id, parent_len);
        PyObject *res = NULL;
        c->truncated = truncated_before;
        if (t && s && p)
            res = PyObject_CallFunctionObjArgs(c->reject, t, s, p, NULL);
        Py_XDECREF(t);
        Py_XDECREF(s);
        Py_XDECREF(p);
        rc = res == NULL ? ERR : OK;
        Py_XDECREF(res);
        goto done;
    }
    if (!cur->have_trace || memcmp(cur->trace_id, trace_id, 16) != 0) {
        /* spans of one trace usually come together: hex and look up once */
        PyObject *key = shared_hex(c->ids, trace_id, 16);
        if (key == NULL) {
            rc = ERR;
            goto done;
        }
        PyObject *list = PyDict_GetItemWithError(c->traces, key);
        if (list == NULL) {
            if (PyErr_Occurred() || (list = PyList_New(0)) == NULL) {
                Py_DECREF(key);
                rc = ERR;
                goto done;
            }
            int set = PyDict_SetItem(c->traces, key, list);
            Py_DECREF(list); /* the dict holds it */
            if (set) {
                Py_DECREF(key);
                rc = ERR;
                goto done;
            }
        }
        Py_XSETREF(cur->hex, key);
        memcpy(cur->trace_id, trace_id, 16);
        cur->have_trace = 1;
        cur->list = list;
    }
    tid = cur->hex;
    Py_INCREF(tid);
    sid = shared_hex(c->ids, span_id, 8);
    if (sid == NULL) {
        rc = ERR;
        goto done;
    }
    if (parent_len == 8 && memcmp(parent_id, zeros, 8) != 0) {
        if ((pid = shared_hex(c->ids, parent_id, 8)) == NULL) {
            rc = ERR;
            goto done;
        }
    } else {
        pid = Py_None;
        Py_INCREF(pid);
    }
    PyObject *kind_o, *code_o;
    if (lookup(c->kinds, (int32_t)(uint32_t)kind, c->kind_default, &kind_o) != OK
        || lookup(c->codes, status_code, c->code_default, &code_o) != OK) {
        rc = ERR;
        goto done;
    }
    start_o = PyLong_FromUnsignedLongLong(start);
    end_o = PyLong_FromUnsignedLongLong(end);
    if (start_o == NULL || end_o == NULL) {
        rc = ERR;
        goto done;
    }
    if (events != NULL) {
        ev_tuple = PyList_AsTuple(events);
        if (ev_tuple == NULL) {
            rc = ERR;
            goto done;
        }
    } else {
        ev_tuple = c->empty_tuple;
        Py_INCREF(ev_tuple);
    }
    PyObject *args[13] = {tid, sid, pid, nm, kind_o, start_o, end_o, code_o, msgtext, attrs, ev_tuple, resource, scope};
    span_obj = PyObject_Vectorcall(c->new_span, args, 13, NULL);
    if (span_obj == NULL || PyList_Append(cur->list, span_obj)) {
        rc = ERR;
        goto done;
    }
done:
    Py_XDECREF(span_obj);
    Py_XDECREF(ev_tuple);
    Py_XDECREF(start_o);
    Py_XDECREF(end_o);
    Py_XDECREF(pid);
    Py_XDECREF(sid);
    Py_XDECREF(tid);
    Py_XDECREF(msgtext);
    Py_XDECREF(nm);
    Py_XDECREF(events);
    Py_DECREF(attrs);
    return rc;
}

/* ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; } */
static int
scope_spans(Ctx *c, const Field *msg, PyObject *resource)
{
    Reader r = sub(msg);
    Field f;
    const uint8_t *scope = NULL;
    Py_ssize_t scope_len = 0;
    while (r.p < r.end) { /* first pass: the scope may come after the spans */
        CHECK(next_field(&r, &f));
        if (f.field == 1) {
            if (f.wire != 2 || scope != NULL)
                return ODD;
            scope = f.data;
            scope_len = f.len;
        } else if (f.field == 2 && f.wire != 2) {
            return ODD;
        }
    }
    const uint8_t *name = (const uint8_t *)"";
    Py_ssize_t name_len = 0;
    if (scope != NULL) {
        Reader sr = {scope, scope + scope_len};
        while (sr.p < sr.end) {
            CHECK(next_field(&sr, &f));
            if (f.field == 1) {
                if (f.wire != 2 || !earlier_utf8(name, name_len))
                    return ODD;
                name = f.data;
                name_len = f.len;
            }
        }
    }
    PyObject *scope_name;
    TEXT_OR_FAIL(scope_name, name, name_len);
    TraceCursor cur = {{0}, 0, NULL, NULL};
    r = sub(msg);
    int rc = OK;
    while (rc == OK && r.p < r.end) {
        rc = next_field(&r, &f);
        if (rc == OK && f.field == 2)
            rc = span(c, &f, resource, scope_name, &cur);
    }
    Py_XDECREF(cur.hex);
    Py_DECREF(scope_name);
    return rc;
}

/* ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; } */
static int
resource_spans(Ctx *c, const Field *msg)
{
    Reader r = sub(msg);
    Field f, res = {0};
    int have_resource = 0;
    while (r.p < r.end) { /* first pass: the resource may come after its spans */
        CHECK(next_field(&r, &f));
        if (f.field == 1) {
            if (f.wire != 2 || have_resource)
                return ODD;
            res = f;
            have_resource = 1;
        } else if (f.field == 2 && f.wire != 2) {
            return ODD;
        }
    }
    PyObject *resource = PyDict_New();
    if (resource == NULL)
        return ERR;
    int rc = have_resource ? attributes_into(c, resource, &res, 0) : OK;
    r = sub(msg);
    while (rc == OK && r.p < r.end) {
        rc = next_field(&r, &f);
        if (rc == OK && f.field == 2)
            rc = scope_spans(c, &f, resource);
    }
    Py_DECREF(resource);
    return rc;
}

static PyObject *
decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "decode(body, traces, reject, new_span, new_event, kinds, codes, max_depth, max_value)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (!PyDict_Check(args[1]) || !PyDict_Check(args[5]) || !PyDict_Check(args[6])) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "traces, kinds and codes must be dicts");
        return NULL;
    }
    Ctx c = {args[1], args[2], args[3], args[4], args[5], args[6], NULL, NULL, NULL, NULL, 0, 0, 0};
    c.max_depth = PyLong_AsLong(args[7]);
    c.max_value = PyLong_AsSsize_t(args[8]);
    if ((c.max_depth == -1 || c.max_value == -1) && PyErr_Occurred()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    PyObject *zero = PyLong_FromLong(0);
    c.empty_tuple = PyTuple_New(0);
    c.ids = PyDict_New();
    int rc = (zero && c.empty_tuple && c.ids) ? OK : ERR;
    if (rc == OK) {
        c.kind_default = PyDict_GetItemWithError(c.kinds, zero);
        c.code_default = PyDict_GetItemWithError(c.codes, zero);
        if (c.kind_default == NULL || c.code_default == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "kinds and codes must map 0");
            rc = ERR;
        }
    }
    Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    Field f;
    while (rc == OK && r.p < r.end) {
        rc = next_field(&r, &f);
        if (rc == OK && f.field == 1)
            rc = f.wire != 2 ? ODD : resource_spans(&c, &f);
    }
    Py_XDECREF(zero);
    Py_XDECREF(c.empty_tuple);
    Py_XDECREF(c.ids);
    PyBuffer_Release(&view);
    if (rc == ERR)
        return NULL;
    return PyLong_FromSsize_t(rc == OK ? c.truncated : -1);
}


/* pair(raw, max_depth, max_value): one serialized KeyValue, as decode() reads it inside a span. */
static PyObject *
pair(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "pair(raw, max_depth, max_value)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Ctx c = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0};
    c.max_depth = PyLong_AsLong(args[1]);
    c.max_value = PyLong_AsSsize_t(args[2]);
    PyObject *result = NULL;
    PyObject *dict = NULL;
    if ((c.max_depth == -1 || c.max_value == -1) && PyErr_Occurred())
        goto done;
    if ((dict = PyDict_New()) == NULL)
        goto done;
    int rc = key_value_into(&c, dict, (const uint8_t *)view.buf, view.len, 0);
    if (rc == ERR)
        goto done;
    if (rc == ODD) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    Py_ssize_t at = 0;
    PyObject *key, *value;
    if (PyDict_Next(dict, &at, &key, &value))
        result = Py_BuildValue("(OOn)", key, value, c.truncated);
done:
    Py_XDECREF(dict);
    PyBuffer_Release(&view);
    return result;
}

/* ---- constructor(cls, names): a positional constructor for slotted classes -------------
 *
 * collector.model.fast_constructor's compiled form. The returned object, called with one
 * value per name (positionally or by keyword), allocates an instance of cls and stores each value straight into its
 * slot (the offsets are read from the class's member descriptors once), without __init__
 * or __setattr__: ~0.1 µs instead of ~0.8 µs for a 13-field Span. The class must be a
 * plain slotted class whose every name is an object slot (dataclasses with slots=True).
 */
typedef struct {
    PyObject_VAR_HEAD /* allocated with PyObject_GC_NewVar: ob_size must not overlap cls */
    PyTypeObject *cls;
    PyObject *names;
    Py_ssize_t n;
    vectorcallfunc vectorcall;
    Py_ssize_t offsets[1];
} Constructor;

static PyObject *
constructor_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Constructor *c = (Constructor *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw != c->n) {
        PyErr_Format(PyExc_TypeError, "%s constructor takes exactly %zd arguments (%zd given)",
                     c->cls->tp_name, c->n, nargs + nkw);
        return NULL;
    }
    PyObject *obj = c->cls->tp_alloc(c->cls, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject **slot = (PyObject **)((char *)obj + c->offsets[i]);
        Py_INCREF(args[i]);
        Py_XSETREF(*slot, args[i]);
    }
    for (Py_ssize_t k = 0; k < nkw; k++) { /* keywords: by name, each slot exactly once */
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i = nargs;
        while (i < c->n && PyTuple_GET_ITEM(c->names, i) != key) /* interned: identity first */
            i++;
        if (i == c->n) {
            for (i = nargs; i < c->n; i++) {
                int eq = PyUnicode_Compare(PyTuple_GET_ITEM(c->names, i), key);
                if (eq == -1 && PyErr_Occurred()) {
                    Py_DECREF(obj);
                    return NULL;
                }
                if (eq == 0)
                    break;
            }
        }
        PyObject **slot = i < c->n ? (PyObject **)((char *)obj + c->offsets[i]) : NULL;
        if (slot == NULL || *slot != NULL) {
            PyErr_Format(PyExc_TypeError, "%s constructor: unexpected or repeated argument %R", c->cls->tp_name, key);
            Py_DECREF(obj);
            return NULL;
        }
        Py_INCREF(args[nargs + k]);
        *slot = args[nargs + k];
    }
    return obj;
}

static int
constructor_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(((Constructor *)self)->cls);
    Py_VISIT(((Constructor *)self)->names);
    return 0;
}

static int
constructor_clear(PyObject *self)
{
    Py_CLEAR(((Constructor *)self)->cls);
    Py_CLEAR(((Constructor *)self)->names);
    return 0;
}

static void
constructor_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    constructor_clear(self);
    PyObject_GC_Del(self);
}

static PyTypeObject ConstructorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "collector._otlp_fast.Constructor",
    .tp_basicsize = sizeof(Constructor) - sizeof(Py_ssize_t),
    .tp_itemsize = sizeof(Py_ssize_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Constructor, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = constructor_traverse,
    .tp_clear = constructor_clear,
    .tp_dealloc = constructor_dealloc,
    .tp_doc = "Positional constructor of a slotted class (see collector.model.fast_constructor).",
};

static PyObject *
constructor(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "constructor(cls, names: tuple[str, ...])");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *names = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (cls->tp_dictoffset != 0 || cls->tp_alloc == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a slotted class without __dict__", cls->tp_name);
        return NULL;
    }
    Constructor *c = PyObject_GC_NewVar(Constructor, &ConstructorType, n > 0 ? n : 1);
    if (c == NULL)
        return NULL;
    c->cls = NULL;
    c->names = NULL;
    c->n = n;
    c->vectorcall = constructor_call;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *descr = PyDict_GetItemWithError(cls->tp_dict, name);
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)descr)->d_member->type != T_OBJECT_EX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s.%S is not an object slot", cls->tp_name, name);
            Py_DECREF(c);
            return NULL;
        }
        c->offsets[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
    }
    Py_INCREF(cls);
    c->cls = cls;
    Py_INCREF(names);
    c->names = names;
    PyObject_GC_Track((PyObject *)c);
    return (PyObject *)c;
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "decode(body, traces, reject, new_span, new_event, kinds, codes, max_depth, max_value) -> int\n\n"
     "Append the spans of an OTLP trace request to traces; returns the values cut, -1: decode it in Python."},
    {"pair", (PyCFunction)(void (*)(void))pair, METH_FASTCALL,
     "pair(raw, max_depth, max_value) -> (key, value, values cut) of one serialized KeyValue, None: unusual."},
    {"constructor", (PyCFunction)(void (*)(void))constructor, METH_FASTCALL,
     "constructor(cls, names) -> callable taking one value per slot name, positionally."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "collector._otlp_fast", "Compiled decoder for ordinary OTLP trace requests.", -1, methods,
};

PyMODINIT_FUNC
PyInit__otlp_fast(void)
{
    if (PyType_Ready(&ConstructorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", 2) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
