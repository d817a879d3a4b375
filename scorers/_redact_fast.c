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
    PyObject *found[3] = {NULL, NULL, NULL};
    int key = 0, open = 0;
    const Py_UCS1 *bytes = ukind == PyUnicode_1BYTE_KIND ? (const Py_UCS1 *)data : NULL;
    for (Py_ssize_t i = 0; i <= n; i++) {
        unsigned char bits = 0;
        if (bytes != NULL && !open) {  /* prose between runs: skip what can neither open a run nor a key */
            const unsigned char skip = (unsigned char)(openers | (key ? 0 : B_MARK));
            while (i < n && !(TABLE[bytes[i]] & skip))
                i++;
        }
        if (i < n) {
            Py_UCS4 ch = ukind == PyUnicode_1BYTE_KIND ? ((const Py_UCS1 *)data)[i] : PyUnicode_READ(ukind, data, i);
            bits = bits_of(ch);
            if ((bits & B_MARK) && !key && i + 1 < n) {
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

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(text) -> None | (key_marker, email_runs, card_runs, phone_runs)."},
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
