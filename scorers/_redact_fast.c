/* Compiled candidate scanner of scorers/redact.py.
 *
 * scan(text) finds, in one pass, whether a literal marker of the key pattern occurs and the
 * (start, end) bounds of the maximal runs of ``text`` in which a built-in pattern of each kind can
 * match, in order (a run begins where a match can: at a digit for cards, at a digit, '+' or '(' for
 * phones, so the spaces of prose open none):
 *
 *   cards:  runs of decimal digits, ' ' and '-' holding at least 13 digits;
 *   phones: runs of decimal digits, ' ', '.', '-', '(', ')' and '+' holding at least 8 digits and
 *           either two groups of 3+ consecutive digits (a grouped number ends in two groups of 3-4
 *           digits) or one of 8+ (an international number), so dates and short ids are not runs;
 *   emails: runs of ASCII letters and digits, '.', '_', '%', '+', '-' and '@' holding an '@'.
 *
 * Every match of the pattern consists of characters of its class only, so it lies inside one such
 * run; "decimal digit" is what the regular expression's \d matches in a str pattern
 * (Py_UNICODE_ISDECIMAL). The Python side runs the exact regular expression on each run with one
 * character of context on either side (the patterns' look-behinds and look-aheads read one
 * character), which gives what the expression gives over the whole text; redact.py has the
 * pure-Python twin of this scanner, which the tests compare it with.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* Appends (start, end) to *list (created on first use). */
static int
append_run(PyObject **list, Py_ssize_t start, Py_ssize_t end)
{
    if (*list == NULL && (*list = PyList_New(0)) == NULL)
        return -1;
    PyObject *pair = Py_BuildValue("(nn)", start, end);
    if (pair == NULL)
        return -1;
    int rc = PyList_Append(*list, pair);
    Py_DECREF(pair);
    return rc;
}

/* Whether the literal ``mk`` starts at i. */
static inline int
literal_at(int ukind, const void *data, Py_ssize_t n, Py_ssize_t i, const char *mk)
{
    Py_ssize_t j = 0;
    while (mk[j] && i + j < n && PyUnicode_READ(ukind, data, i + j) == (Py_UCS4)(unsigned char)mk[j])
        j++;
    return !mk[j];
}

/* Whether one of the key pattern's literal markers starts at i (its first character is ``ch``):
 * sk-, AKIA, AIza, xox, eyJ, earer, EARER, ghp_, gho_, ghu_, ghs_, ghr_. */
static inline int
marker_at(int ukind, const void *data, Py_ssize_t n, Py_ssize_t i, Py_UCS4 ch)
{
    switch (ch) {
    case 's':
        return literal_at(ukind, data, n, i, "sk-");
    case 'A':
        return literal_at(ukind, data, n, i, "AKIA") || literal_at(ukind, data, n, i, "AIza");
    case 'x':
        return literal_at(ukind, data, n, i, "xox");
    case 'e':
        return literal_at(ukind, data, n, i, "eyJ") || literal_at(ukind, data, n, i, "earer");
    case 'E':
        return literal_at(ukind, data, n, i, "EARER");
    case 'g':
        if (i + 3 < n && PyUnicode_READ(ukind, data, i + 1) == 'h' && PyUnicode_READ(ukind, data, i + 3) == '_') {
            Py_UCS4 c = PyUnicode_READ(ukind, data, i + 2);
            return c == 'p' || c == 'o' || c == 'u' || c == 's' || c == 'r';
        }
        return 0;
    default:
        return 0;
    }
}

enum { B_CARD = 1, B_PHONE = 2, B_EMAIL = 4, B_DIGIT = 8, B_AT = 16, B_MARK = 32, B_PSTART = 64 };
static unsigned char TABLE[256]; /* bytes 128-255 (Latin-1): no decimal digit among them, so 0 */

static void
init_table(void)
{
    for (int c = 0; c < 128; c++) {
        unsigned char bits = 0;
        if (c >= '0' && c <= '9')
            bits |= B_CARD | B_PHONE | B_EMAIL | B_DIGIT;
        if (c == ' ' || c == '-')
            bits |= B_CARD;
        if (c == ' ' || c == '.' || c == '-' || c == '(' || c == ')' || c == '+')
            bits |= B_PHONE;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' || c == '%' || c == '+' ||
            c == '-' || c == '@')
            bits |= B_EMAIL;
        if (c == '@')
            bits |= B_AT;
        if (c == 's' || c == 'A' || c == 'x' || c == 'e' || c == 'E' || c == 'g')
            bits |= B_MARK;
        if (c == '+' || c == '(')
            bits |= B_PSTART;
        TABLE[c] = bits;
    }
}

static inline unsigned char
bits_of(Py_UCS4 ch)
{
    if (ch < 128)
        return TABLE[ch];
    return Py_UNICODE_ISDECIMAL(ch) ? (B_CARD | B_PHONE | B_DIGIT) : 0;
}

/* scan(text) -> None | (key_marker, email_runs, card_runs, phone_runs): one pass over ``text`` for
 * every kind; None when no kind has a run and no key marker is present; a kind without a run: None. */
/* scan(text) -> None | (key_marker, email_runs, card_runs, phone_runs): one pass over ``text`` for
 * every kind; None when no kind has a run and no key marker is present; a kind without a run: None.
 * Email runs are tracked only when the text holds an '@' (most text does not, and letters are in
 * their class), so ordinary prose costs one table lookup a character. */
static PyObject *
scan(PyObject *self, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "scan() takes a str");
        return NULL;
    }
    int ukind = PyUnicode_KIND(arg);
    const void *data = PyUnicode_DATA(arg);
    Py_ssize_t n = PyUnicode_GET_LENGTH(arg);
    Py_ssize_t at = PyUnicode_FindChar(arg, '@', 0, n, 1);
    if (at == -2)
        return NULL;
    PyObject *found[3] = {NULL, NULL, NULL};
    int key = 0, open = 0, marks = 1;
    const Py_UCS1 *bytes = ukind == PyUnicode_1BYTE_KIND ? (const Py_UCS1 *)data : NULL;
    if (bytes != NULL) {
        /* One byte a character (most text): a tight loop that stops only where a phone run can open (a
         * digit, '+', '(': a card run opens at a digit, and card characters are phone characters, so card
         * runs lie inside phone runs) or a key marker can begin; e-mail runs around each '@'. The same
         * runs as the general loop below, in far fewer instructions a character. */
        for (Py_ssize_t i = 0; i < n;) {
            const unsigned char stop = (unsigned char)(B_DIGIT | B_PSTART | (key ? 0 : B_MARK));
            while (i < n && !(TABLE[bytes[i]] & stop))
                i++;
            if (i >= n)
                break;
            if (!(TABLE[bytes[i]] & (B_DIGIT | B_PSTART))) { /* a letter a key marker begins with */
                Py_UCS1 ch = bytes[i], c2 = i + 1 < n ? bytes[i + 1] : 0;
                if ((ch == 's' && c2 == 'k') || (ch == 'A' && (c2 == 'K' || c2 == 'I')) || (ch == 'x' && c2 == 'o') ||
                    (ch == 'e' && (c2 == 'y' || c2 == 'a')) || (ch == 'E' && c2 == 'A') || (ch == 'g' && c2 == 'h'))
                    key = marker_at(ukind, data, n, i, ch);
                i++;
                continue;
            }
            /* the phone run from here: digits and ' .-()+'; 8 digits or more, in two groups of 3+ or one of 8+ */
            Py_ssize_t begin = i, digits = 0, group = 0, groups3 = 0, long8 = 0;
            for (; i < n && (TABLE[bytes[i]] & B_PHONE); i++) {
                if (TABLE[bytes[i]] & B_DIGIT) {
                    digits++;
                    group++;
                    groups3 += group == 3;
                    long8 |= group == 8;
                }
                else
                    group = 0;
            }
            if (digits >= 8 && (groups3 >= 2 || long8) && append_run(&found[1], begin, i) < 0)
                goto fail;
            /* card runs inside it: from a digit over digits, ' ' and '-'; 13 digits or more */
            if (digits >= 13) {
                for (Py_ssize_t j = begin; j < i;) {
                    while (j < i && !(TABLE[bytes[j]] & B_DIGIT))
                        j++;
                    if (j >= i)
                        break;
                    Py_ssize_t start_card = j, card_digits = 0;
                    for (; j < i && (TABLE[bytes[j]] & B_CARD); j++)
                        card_digits += (TABLE[bytes[j]] & B_DIGIT) != 0;
                    if (card_digits >= 13 && append_run(&found[0], start_card, j) < 0)
                        goto fail;
                }
            }
        }
        /* E-mail runs: the maximal run of e-mail characters around each '@' (a run holds one). */
        for (Py_ssize_t p = at; p >= 0 && p < n;) {
            const Py_UCS1 *next = memchr(bytes + p, '@', (size_t)(n - p));
            if (next == NULL)
                break;
            Py_ssize_t left = next - bytes, right = left + 1;
            while (left > 0 && (TABLE[bytes[left - 1]] & B_EMAIL))
                left--;
            while (right < n && (TABLE[bytes[right]] & B_EMAIL))
                right++;
            if (append_run(&found[2], left, right) < 0)
                goto fail;
            p = right;
        }
        goto done;
    }
    /* per kind (card, phone, email): its class bit, what it counts, how many a run needs */
    static const unsigned char member[3] = {B_CARD, B_PHONE, B_EMAIL};
    /* what may begin a run: what a match begins with (a digit; '+', '(' or a digit; any email character) */
    static const unsigned char opens[3] = {B_DIGIT, B_DIGIT | B_PSTART, B_EMAIL};
    static const unsigned char counts[3] = {B_DIGIT, B_DIGIT, B_AT};
    static const Py_ssize_t need[3] = {13, 8, 1};
    const unsigned char classes = B_CARD | B_PHONE | (at >= 0 ? B_EMAIL : 0);
    const unsigned char openers = B_DIGIT | B_PSTART | (at >= 0 ? B_EMAIL : 0);
    const int kinds = at >= 0 ? 3 : 2;
    Py_ssize_t start[3] = {-1, -1, -1}, counted[3] = {0, 0, 0};
    /* phone runs: the length of the current digit group, how many groups had 3+ digits, one had 8+ */
    Py_ssize_t group = 0, groups3 = 0, long8 = 0;
    for (Py_ssize_t i = 0; i <= n; i++) {
        unsigned char bits = 0;
        if (bytes != NULL && !open) {  /* prose between runs: skip what can neither open a run nor a key */
            const unsigned char skip = (unsigned char)(openers | (key || !marks ? 0 : B_MARK));
            while (i < n && !(TABLE[bytes[i]] & skip))
                i++;
        }
        if (i < n) {
            Py_UCS4 ch = ukind == PyUnicode_1BYTE_KIND ? ((const Py_UCS1 *)data)[i] : PyUnicode_READ(ukind, data, i);
            bits = bits_of(ch);
            if ((bits & B_MARK) && marks && !key && i + 1 < n) {
                Py_UCS4 c2 = PyUnicode_READ(ukind, data, i + 1);
                if ((ch == 's' && c2 == 'k') || (ch == 'A' && (c2 == 'K' || c2 == 'I')) || (ch == 'x' && c2 == 'o') ||
                    (ch == 'e' && (c2 == 'y' || c2 == 'a')) || (ch == 'E' && c2 == 'A') || (ch == 'g' && c2 == 'h'))
                    key = marker_at(ukind, data, n, i, ch);
            }
            bits &= (unsigned char)(classes | B_DIGIT | B_AT | B_PSTART);
        }
        if (!(bits & openers) && !open)
            continue;
        open = 0;
        for (int k = 0; k < kinds; k++) {
            if ((bits & member[k]) && (start[k] >= 0 || (bits & opens[k]))) {
                if (start[k] < 0) {
                    start[k] = i;
                    counted[k] = 0;
                    if (k == 1)
                        group = groups3 = long8 = 0;
                }
                counted[k] += (bits & counts[k]) != 0;
                if (k == 1) {
                    if (bits & B_DIGIT)
                        group++;
                    else
                        group = 0;
                    groups3 += group == 3;
                    long8 |= group == 8;
                }
                open = 1;
            }
            else if (start[k] >= 0) {
                if (counted[k] >= need[k] && (k != 1 || groups3 >= 2 || long8) &&
                    append_run(&found[k], start[k], i) < 0)
                    goto fail;
                start[k] = -1;
            }
        }
    }
done:
    if (!key && found[0] == NULL && found[1] == NULL && found[2] == NULL)
        Py_RETURN_NONE;
    for (int k = 0; k < 3; k++)
        if (found[k] == NULL)
            found[k] = Py_NewRef(Py_None);
    /* in the order of the passes: keys, emails, cards, phones */
    return Py_BuildValue("(ONNN)", key ? Py_True : Py_False, found[2], found[0], found[1]);
fail:
    for (int k = 0; k < 3; k++)
        Py_XDECREF(found[k]);
    return NULL;
}


/* ---- the run-details form's hot loops (review_queue/details.py, scorers/dialects/genai.py) ---- */

/* A str value ``v`` is stored as it is: what Texts.__call__(v) gives, computed without calling it when
 * that is certain (1 when unchanged, 0 when ``kept`` holds the stored form, -1 on error). */
typedef struct {
    PyObject *values;  /* Texts.values */
    PyObject *text;    /* the Texts */
    PyObject *redact;  /* Redactor.text */
    int builtins;      /* Texts.builtins_only */
    Py_ssize_t cached, limit, entries; /* Texts.CACHED_CHARS, MAX_VALUE_CHARS, Texts.CACHE_ENTRIES */
} Memory;

static int
stored_text(PyObject *v, const Memory *mem, PyObject **kept)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    *kept = NULL;
    if (n <= mem->cached) {
        PyObject *found = PyDict_GetItemWithError(mem->values, v); /* borrowed */
        if (found == NULL && PyErr_Occurred())
            return -1;
        if (found != NULL && PyUnicode_CheckExact(found) && PyUnicode_GET_LENGTH(found) <= mem->limit) {
            if (found == v)
                return 1;
            int eq = PyUnicode_Compare(found, v);
            if (eq == -1 && PyErr_Occurred())
                return -1;
            if (eq == 0)
                return 1;
            *kept = Py_NewRef(found);
            return 0;
        }
    }
    if (mem->builtins && n <= mem->limit) {
        Py_ssize_t nul = PyUnicode_FindChar(v, 0, 0, n, 1);
        if (nul == -2)
            return -1;
        if (nul == -1) {
            PyObject *found = scan(NULL, v);
            if (found == NULL)
                return -1;
            if (found == Py_None) {
                Py_DECREF(found);
                if (n <= mem->cached) { /* remembered as Texts.__call__ remembers it */
                    if (PyDict_GET_SIZE(mem->values) >= mem->entries)
                        PyDict_Clear(mem->values);
                    if (PyDict_SetItem(mem->values, v, v) < 0)
                        return -1;
                }
                return 1;
            }
            if (n > mem->cached) { /* the built-ins where the scan says: Redactor.text, not scanned again */
                *kept = PyObject_CallFunctionObjArgs(mem->redact, v, found, NULL);
                Py_DECREF(found);
                goto called;
            }
            Py_DECREF(found);
        }
    }
    *kept = PyObject_CallOneArg(mem->text, v);
called:
    if (*kept == NULL)
        return -1;
    if (*kept == v)
        return 1;
    if (PyUnicode_CheckExact(*kept)) {
        int eq = PyUnicode_Compare(*kept, v);
        if (eq == -1 && PyErr_Occurred())
            return -1;
        if (eq == 0) {
            Py_CLEAR(*kept);
            return 1;
        }
    }
    return 0;
}

/* A scalar stored as it is (1), else 0 (str: ``kept`` may hold its stored form), -1 on error. Values this
 * cannot decide (big ints, non-finite floats, other types) give 0 with ``kept`` NULL. */
static int
stored_scalar(PyObject *v, const Memory *mem, PyObject **kept)
{
    *kept = NULL;
    if (PyUnicode_CheckExact(v))
        return stored_text(v, mem, kept);
    if (v == Py_None || PyBool_Check(v))
        return 1;
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        return overflow == 0;
    }
    if (PyFloat_CheckExact(v))
        return isfinite(PyFloat_AS_DOUBLE(v)) ? 1 : 0;
    return 0;
}

/* A new dict holding the first ``count`` items of ``attrs`` (those kept unchanged before the first
 * change); NULL with an exception set on failure. */
static PyObject *
copy_prefix(PyObject *attrs, Py_ssize_t count)
{
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0, copied = 0;
    PyObject *key, *value;
    while (copied < count && PyDict_Next(attrs, &pos, &key, &value)) {
        if (PyDict_SetItem(out, key, value) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        copied++;
    }
    return out;
}

/* stored_attributes(attrs, keys, values, text, key, value, dropped_marker, builtins, max_attributes,
 * max_list_items, cached_chars, max_value_chars, cache_entries, redact) -> (mapping, dropped): review_queue.details._attributes
 * (depth 0) of a dict. ``attrs`` itself when every key and value is stored as it is. */
static PyObject *
stored_attributes(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError, "stored_attributes() takes 14 arguments");
        return NULL;
    }
    PyObject *attrs = args[0], *keys = args[1], *values = args[2], *text = args[3], *keyfn = args[4],
             *valuefn = args[5], *marker = args[6];
    int builtins = PyObject_IsTrue(args[7]);
    Py_ssize_t max_attrs = PyLong_AsSsize_t(args[8]), max_items = PyLong_AsSsize_t(args[9]),
               cached = PyLong_AsSsize_t(args[10]), limit = PyLong_AsSsize_t(args[11]),
               entries = PyLong_AsSsize_t(args[12]);
    if (builtins < 0 || PyErr_Occurred())
        return NULL;
    const Memory mem = {values, text, args[13], builtins, cached, limit, entries};
    if (!PyDict_CheckExact(attrs) || !PyDict_CheckExact(keys) || !PyDict_CheckExact(values)) {
        PyErr_SetString(PyExc_TypeError, "stored_attributes() takes dicts");
        return NULL;
    }
    PyObject *out = NULL, *key, *value, *zero = NULL;
    Py_ssize_t pos = 0, count = 0, dropped = 0;
    while (PyDict_Next(attrs, &pos, &key, &value)) {
        Py_INCREF(key);
        Py_INCREF(value);
        PyObject *stored = NULL, *kept = NULL;
        int same = 0;
        int drop = 0;
        stored = PyDict_GetItemWithError(keys, key);
        if (stored != NULL)
            Py_INCREF(stored);
        else if (PyErr_Occurred())
            goto fail_item;
        else if (PyUnicode_Check(key)) { /* Texts.key; ``None`` or "" (falsy) the first time: dropped */
            stored = PyObject_CallOneArg(keyfn, key);
            if (stored == NULL)
                goto fail_item;
            int truth = PyObject_IsTrue(stored);
            if (truth < 0)
                goto fail_item;
            drop = !truth;
        }
        else
            drop = 1;
        drop = drop || stored == marker || (out != NULL ? PyDict_GET_SIZE(out) : count) >= max_attrs;
        if (!drop) {
            int key_same = stored == key;
            if (!key_same && PyUnicode_CheckExact(stored) && PyUnicode_CheckExact(key)) {
                int eq = PyUnicode_Compare(stored, key);
                if (eq == -1 && PyErr_Occurred())
                    goto fail_item;
                key_same = eq == 0;
            }
            int rc;
            if (PyList_CheckExact(value) && PyList_GET_SIZE(value) <= max_items) {
                rc = 1;
                for (Py_ssize_t i = 0; rc == 1 && i < PyList_GET_SIZE(value); i++) {
                    PyObject *item = PyList_GET_ITEM(value, i), *item_kept = NULL;
                    Py_INCREF(item);
                    rc = stored_scalar(item, &mem, &item_kept);
                    Py_DECREF(item);
                    Py_XDECREF(item_kept);
                }
                if (rc < 0)
                    goto fail_item;
            }
            else {
                rc = stored_scalar(value, &mem, &kept);
                if (rc < 0)
                    goto fail_item;
            }
            if (rc == 0 && kept == NULL) { /* what only the Python _value decides */
                if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
                    goto fail_item;
                kept = PyObject_CallFunctionObjArgs(valuefn, value, text, zero, NULL);
                if (kept == NULL)
                    goto fail_item;
            }
            same = key_same && rc == 1;
            if (!same && out == NULL) { /* the first change: copy what came before */
                if ((out = copy_prefix(attrs, count)) == NULL)
                    goto fail_item;
            }
            if (same && out == NULL)
                count++;
            else if (PyDict_SetItem(out, stored, kept != NULL ? kept : value) < 0)
                goto fail_item;
        }
        else {
            if (out == NULL) {
                if ((out = copy_prefix(attrs, count)) == NULL)
                    goto fail_item;
            }
            dropped++;
        }
        Py_XDECREF(stored);
        Py_XDECREF(kept);
        Py_DECREF(key);
        Py_DECREF(value);
        continue;
    fail_item:
        Py_XDECREF(stored);
        Py_XDECREF(kept);
        Py_DECREF(key);
        Py_DECREF(value);
        Py_XDECREF(out);
        Py_XDECREF(zero);
        return NULL;
    }
    Py_XDECREF(zero);
    return Py_BuildValue("(Nn)", out != NULL ? out : Py_NewRef(attrs), dropped);
}

/* The (role, content) of one GenAI message whose parts are all dicts and whose text parts are plain: NULL
 * with no error when the item needs scorers.dialects.genai.message_of (another shape, a tool call part). */
static PyObject *s_empty, *s_name, *s_arguments, *s_response, *s_result;

/* ``as_text(value) or ""`` (scorers/dialects/base.py): a str clipped to ``max_text``, nothing "", any other
 * value through ``as_text``. NULL on error. */
static PyObject *
text_of(PyObject *value, PyObject *as_text, Py_ssize_t max_text)
{
    if (value == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return Py_NewRef(s_empty);
    }
    if (value == Py_None)
        return Py_NewRef(s_empty);
    if (PyUnicode_CheckExact(value))
        return PyUnicode_GET_LENGTH(value) <= max_text ? Py_NewRef(value) : PyUnicode_Substring(value, 0, max_text);
    PyObject *text = PyObject_CallOneArg(as_text, value);
    if (text == NULL)
        return NULL;
    if (text == Py_None) {
        Py_DECREF(text);
        return Py_NewRef(s_empty);
    }
    if (!PyUnicode_CheckExact(text)) { /* as_text gives str or None: anything else is the Python path's */
        Py_DECREF(text);
        PyErr_SetString(PyExc_TypeError, "as_text gave another type");
        return NULL;
    }
    return text;
}

static PyObject *
genai_pair(PyObject *item, PyObject *s_role, PyObject *s_parts, PyObject *s_type, PyObject *s_content,
           PyObject *s_text, PyObject *s_newline, PyObject *as_text, Py_ssize_t max_text)
{
    if (!PyDict_CheckExact(item))
        return NULL;
    PyObject *role = PyDict_GetItemWithError(item, s_role);
    if (role == NULL || !PyUnicode_CheckExact(role) || PyUnicode_GET_LENGTH(role) == 0)
        return NULL;
    PyObject *parts = PyDict_GetItemWithError(item, s_parts);
    if (parts == NULL || !PyList_CheckExact(parts))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(parts);
    PyObject *texts = PyList_New(0);
    if (texts == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *part = PyList_GET_ITEM(parts, i);
        if (!PyDict_CheckExact(part))
            goto other;
        PyObject *kind = PyDict_GetItemWithError(part, s_type);
        if (kind == NULL) {
            if (PyErr_Occurred())
                goto other;
            continue; /* no type: no text */
        }
        if (!PyUnicode_CheckExact(kind))
            goto other;
        if (kind != s_text && PyUnicode_Compare(kind, s_text) != 0) {
            if (PyErr_Occurred())
                goto other;
            PyObject *piece = NULL;
            if (PyUnicode_CompareWithASCIIString(kind, "tool_call") == 0) {
                /* f"tool_call {as_str(name) or ''}({as_text(arguments) or ''})" */
                PyObject *name = PyDict_GetItemWithError(part, s_name);
                if (name == NULL && PyErr_Occurred())
                    goto other;
                if (name != NULL && PyUnicode_Check(name) && !PyUnicode_CheckExact(name))
                    goto other;
                PyObject *args = text_of(PyDict_GetItemWithError(part, s_arguments), as_text, max_text);
                if (args == NULL)
                    goto other;
                piece = PyUnicode_FromFormat("tool_call %U(%U)",
                                             name != NULL && PyUnicode_CheckExact(name) ? name : s_empty, args);
                Py_DECREF(args);
            }
            else if (PyUnicode_CompareWithASCIIString(kind, "tool_call_response") == 0) {
                /* as_text(result if response is None else response) or "" */
                PyObject *found = PyDict_GetItemWithError(part, s_response);
                if (found == NULL && PyErr_Occurred())
                    goto other;
                if (found == NULL || found == Py_None) {
                    found = PyDict_GetItemWithError(part, s_result);
                    if (found == NULL && PyErr_Occurred())
                        goto other;
                }
                piece = text_of(found, as_text, max_text);
            }
            else
                continue; /* any other part type gives no text */
            if (piece == NULL)
                goto other;
            int rc = PyList_Append(texts, piece);
            Py_DECREF(piece);
            if (rc < 0)
                goto other;
            continue;
        }
        PyObject *said = PyDict_GetItemWithError(part, s_content);
        if (said == NULL && PyErr_Occurred())
            goto other;
        if (said != NULL && PyUnicode_Check(said) && !PyUnicode_CheckExact(said))
            goto other;
        if (PyList_Append(texts, said != NULL && PyUnicode_CheckExact(said) ? said : s_empty) < 0)
            goto other;
    }
    PyObject *joined = PyUnicode_Join(s_newline, texts);
    Py_DECREF(texts);
    if (joined == NULL)
        return NULL;
    if (PyUnicode_GET_LENGTH(joined) > max_text) {
        PyObject *cut = PyUnicode_Substring(joined, 0, max_text);
        Py_DECREF(joined);
        if (cut == NULL)
            return NULL;
        joined = cut;
    }
    return Py_BuildValue("(ON)", role, joined);
other:
    Py_DECREF(texts);
    return NULL;
}

/* genai_pairs(items, message_of, as_text, max_text) -> [(role, content)]: ``[(m.role, m.content) for m in
 * map(message_of, items) if m is not None]`` (scorers/dialects/genai.py), the common shape in C. */
static PyObject *
genai_pairs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static PyObject *s_role, *s_parts, *s_type, *s_content, *s_text, *s_newline, *s_role_attr, *s_content_attr;
    if (s_role == NULL) {
        s_role = PyUnicode_InternFromString("role");
        s_parts = PyUnicode_InternFromString("parts");
        s_type = PyUnicode_InternFromString("type");
        s_content = PyUnicode_InternFromString("content");
        s_text = PyUnicode_InternFromString("text");
        s_newline = PyUnicode_InternFromString("\n");
        s_empty = PyUnicode_New(0, 0);
        s_name = PyUnicode_InternFromString("name");
        s_arguments = PyUnicode_InternFromString("arguments");
        s_response = PyUnicode_InternFromString("response");
        s_result = PyUnicode_InternFromString("result");
        s_role_attr = s_role;
        s_content_attr = s_content;
        if (!s_role || !s_parts || !s_type || !s_content || !s_text || !s_newline || !s_empty || !s_name || !s_arguments ||
            !s_response || !s_result)
            return NULL;
    }
    if (nargs != 4 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "genai_pairs(items: list, message_of, as_text, max_text)");
        return NULL;
    }
    PyObject *items = args[0], *message_of = args[1], *as_text = args[2];
    Py_ssize_t max_text = PyLong_AsSsize_t(args[3]);
    if (max_text < 0 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        Py_INCREF(item);
        PyObject *pair = genai_pair(item, s_role, s_parts, s_type, s_content, s_text, s_newline, as_text, max_text);
        if (pair == NULL) {
            PyErr_Clear();
            PyObject *m = PyObject_CallOneArg(message_of, item);
            if (m == NULL)
                goto fail;
            if (m == Py_None) {
                Py_DECREF(m);
                Py_DECREF(item);
                continue;
            }
            PyObject *role = PyObject_GetAttr(m, s_role_attr);
            PyObject *said = role != NULL ? PyObject_GetAttr(m, s_content_attr) : NULL;
            Py_DECREF(m);
            if (said == NULL) {
                Py_XDECREF(role);
                goto fail;
            }
            pair = PyTuple_Pack(2, role, said);
            Py_DECREF(role);
            Py_DECREF(said);
            if (pair == NULL)
                goto fail;
        }
        Py_DECREF(item);
        int rc = PyList_Append(out, pair);
        Py_DECREF(pair);
        if (rc < 0)
            goto fail_out;
        continue;
    fail:
        Py_DECREF(item);
    fail_out:
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(text) -> None | (key_marker, email_runs, card_runs, phone_runs)."},
    {"stored_attributes", (PyCFunction)(void (*)(void))stored_attributes, METH_FASTCALL,
     "stored_attributes(attrs, keys, values, text, key, value, dropped, builtins, max_attributes, max_list_items, "
     "cached_chars, max_value_chars, cache_entries, redact) -> (mapping, dropped)."},
    {"genai_pairs", (PyCFunction)(void (*)(void))genai_pairs, METH_FASTCALL,
     "genai_pairs(items, message_of, as_text, max_text) -> [(role, content)]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "scorers._redact_fast", "Compiled candidate scanner of the built-in redaction patterns.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__redact_fast(void)
{
    init_table();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
