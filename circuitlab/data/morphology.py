"""English inflection by rule with a table of exceptions: enough for a children's lexicon.

`inflections(word, pos)` lists the forms a lemma takes ("run" -> run, runs, ran, running); the lexicon
(`circuitlab.data.lexicon`) and the natural stories' word check (`circuitlab.data.natural`) use it. Parts of speech: "noun", "verb", "adjective".
"""

from __future__ import annotations

IRREGULAR_PLURALS: dict[str, str] = {
    "mouse": "mice", "sheep": "sheep", "fish": "fish", "deer": "deer", "goose": "geese", "knife": "knives",
    "leaf": "leaves", "wolf": "wolves", "octopus": "octopuses", "shelf": "shelves", "child": "children",
    "man": "men", "woman": "women", "foot": "feet", "tooth": "teeth", "person": "people", "loaf": "loaves",
    "wife": "wives", "life": "lives", "half": "halves", "calf": "calves", "scarf": "scarves", "elf": "elves",
    "thief": "thieves", "potato": "potatoes", "tomato": "tomatoes", "hero": "heroes", "volcano": "volcanoes",
    "cactus": "cacti", "moose": "moose", "ox": "oxen", "dwarf": "dwarves",
}

# base -> (past, past participle)
IRREGULAR_VERBS: dict[str, tuple[str, str]] = {
    "be": ("was", "been"), "have": ("had", "had"), "do": ("did", "done"), "go": ("went", "gone"),
    "say": ("said", "said"), "make": ("made", "made"), "take": ("took", "taken"), "see": ("saw", "seen"),
    "come": ("came", "come"), "know": ("knew", "known"), "get": ("got", "gotten"), "give": ("gave", "given"),
    "find": ("found", "found"), "think": ("thought", "thought"), "tell": ("told", "told"),
    "become": ("became", "become"), "leave": ("left", "left"), "feel": ("felt", "felt"), "bring": ("brought", "brought"),
    "begin": ("began", "begun"), "keep": ("kept", "kept"), "hold": ("held", "held"), "write": ("wrote", "written"),
    "stand": ("stood", "stood"), "hear": ("heard", "heard"), "let": ("let", "let"), "mean": ("meant", "meant"),
    "set": ("set", "set"), "meet": ("met", "met"), "run": ("ran", "run"), "pay": ("paid", "paid"),
    "sit": ("sat", "sat"), "speak": ("spoke", "spoken"), "lie": ("lay", "lain"), "lead": ("led", "led"),
    "read": ("read", "read"), "grow": ("grew", "grown"), "lose": ("lost", "lost"), "fall": ("fell", "fallen"),
    "send": ("sent", "sent"), "build": ("built", "built"), "understand": ("understood", "understood"),
    "draw": ("drew", "drawn"), "break": ("broke", "broken"), "spend": ("spent", "spent"), "cut": ("cut", "cut"),
    "rise": ("rose", "risen"), "drive": ("drove", "driven"), "buy": ("bought", "bought"), "wear": ("wore", "worn"),
    "choose": ("chose", "chosen"), "seek": ("sought", "sought"), "throw": ("threw", "thrown"),
    "catch": ("caught", "caught"), "deal": ("dealt", "dealt"), "win": ("won", "won"), "forget": ("forgot", "forgotten"),
    "sell": ("sold", "sold"), "fight": ("fought", "fought"), "teach": ("taught", "taught"), "eat": ("ate", "eaten"),
    "sing": ("sang", "sung"), "swim": ("swam", "swum"), "drink": ("drank", "drunk"), "fly": ("flew", "flown"),
    "ride": ("rode", "ridden"), "hide": ("hid", "hidden"), "bite": ("bit", "bitten"), "shake": ("shook", "shaken"),
    "wake": ("woke", "woken"), "sleep": ("slept", "slept"), "sweep": ("swept", "swept"), "weep": ("wept", "wept"),
    "dig": ("dug", "dug"), "hang": ("hung", "hung"), "swing": ("swung", "swung"), "stick": ("stuck", "stuck"),
    "sting": ("stung", "stung"), "spin": ("spun", "spun"), "shine": ("shone", "shone"), "slide": ("slid", "slid"),
    "blow": ("blew", "blown"), "feed": ("fed", "fed"), "bend": ("bent", "bent"), "lend": ("lent", "lent"),
    "tear": ("tore", "torn"), "freeze": ("froze", "frozen"), "steal": ("stole", "stolen"), "hurt": ("hurt", "hurt"),
    "put": ("put", "put"), "shut": ("shut", "shut"), "spill": ("spilled", "spilled"), "light": ("lit", "lit"),
    "creep": ("crept", "crept"), "kneel": ("knelt", "knelt"), "leap": ("leapt", "leapt"), "sink": ("sank", "sunk"),
    "ring": ("rang", "rung"), "stink": ("stank", "stunk"), "bleed": ("bled", "bled"), "forgive": ("forgave", "forgiven"),
    "knit": ("knitted", "knitted"), "shoot": ("shot", "shot"), "show": ("showed", "shown"), "sew": ("sewed", "sewn"),
    "mistake": ("mistook", "mistaken"), "undo": ("undid", "undone"), "overhear": ("overheard", "overheard"),
}

IRREGULAR_COMPARATIVES: dict[str, tuple[str, str]] = {
    "good": ("better", "best"), "bad": ("worse", "worst"), "far": ("farther", "farthest"),
    "little": ("littler", "littlest"), "many": ("more", "most"), "much": ("more", "most"),
}

_VOWELS = "aeiou"


def plural(noun: str) -> str:
    """English plural ("box" -> "boxes", "puppy" -> "puppies", "mouse" -> "mice")."""
    if noun in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in _VOWELS:
        return noun[:-1] + "ies"
    return noun + "s"


def _doubles_final(word: str) -> bool:
    """Short consonant-vowel-consonant verbs double the last letter (hop -> hopped, run -> running)."""
    return (
        len(word) >= 3 and word[-1] not in _VOWELS + "wxy" and word[-2] in _VOWELS and word[-3] not in _VOWELS
        and sum(ch in _VOWELS for ch in word) == 1
    )


def third_person(verb: str) -> str:
    if verb in ("be", "have", "do", "go"):
        return {"be": "is", "have": "has", "do": "does", "go": "goes"}[verb]
    return plural(verb) if verb not in IRREGULAR_PLURALS else verb + "s"


def past(verb: str) -> str:
    if verb in IRREGULAR_VERBS:
        return IRREGULAR_VERBS[verb][0]
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in _VOWELS:
        return verb[:-1] + "ied"
    if _doubles_final(verb):
        return verb + verb[-1] + "ed"
    return verb + "ed"


def past_participle(verb: str) -> str:
    return IRREGULAR_VERBS[verb][1] if verb in IRREGULAR_VERBS else past(verb)


def present_participle(verb: str) -> str:
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")) and verb != "be":
        return verb[:-1] + "ing"
    if _doubles_final(verb):
        return verb + verb[-1] + "ing"
    return verb + "ing"


def comparative(adjective: str) -> tuple[str, str]:
    """(comparative, superlative) by suffix ("big" -> bigger, biggest; "happy" -> happier, happiest)."""
    if adjective in IRREGULAR_COMPARATIVES:
        return IRREGULAR_COMPARATIVES[adjective]
    if adjective.endswith("e"):
        return adjective + "r", adjective + "st"
    if adjective.endswith("y") and len(adjective) > 2 and adjective[-2] not in _VOWELS:
        return adjective[:-1] + "ier", adjective[:-1] + "iest"
    if _doubles_final(adjective):
        return adjective + adjective[-1] + "er", adjective + adjective[-1] + "est"
    return adjective + "er", adjective + "est"


def adverb(adjective: str) -> str:
    """The -ly adverb ("happy" -> "happily", "gentle" -> "gently", "quick" -> "quickly")."""
    if adjective.endswith("y") and len(adjective) > 2 and adjective[-2] not in _VOWELS:
        return adjective[:-1] + "ily"
    if adjective.endswith("le") and len(adjective) > 3:
        return adjective[:-1] + "y"
    if adjective.endswith("ic"):
        return adjective + "ally"
    return adjective + "ly"


def inflections(word: str, pos: str) -> tuple[str, ...]:
    """Every form of a lemma, the lemma first, without repeats."""
    if pos == "noun":
        forms = [word, plural(word)]
    elif pos == "verb":
        forms = [word, third_person(word), past(word), past_participle(word), present_participle(word)]
    elif pos == "adjective":
        forms = [word, *comparative(word), adverb(word)]
    else:
        raise ValueError(f"pos={pos!r}; expected noun, verb or adjective")
    return tuple(dict.fromkeys(forms))

