"""Writes corpus.txt, the small plain-text corpus the trainer ships with.

The text is generated here from a seeded grammar (short stories, a ledger of
sums, weather notes, recipes, letters), all words our own, so the corpus is
original, reproducible and has learnable structure: a byte-level model first
learns spelling, then the recurring sentence patterns, then facts such as
"seven plus five is twelve".

    python -m torchtpu.data.make_corpus [--kb 160] [--seed 1234]

The shipped corpus.txt is this script's output with the defaults; the trainer
only reads the file (nothing is generated or downloaded at run time).
"""
import argparse
import os
import random

NAMES = ["Ada", "Bram", "Cleo", "Dov", "Edda", "Finn", "Greta", "Hugo", "Ines", "Jonas",
         "Kira", "Lio", "Mira", "Nils", "Olga", "Pim", "Quin", "Rosa", "Sami", "Tove"]
ANIMALS = ["fox", "heron", "badger", "otter", "crow", "hare", "mole", "owl", "wren", "lynx"]
PLACES = ["the mill", "the harbour", "the old bridge", "the orchard", "the market",
          "the lighthouse", "the quarry", "the library", "the bakery", "the ferry dock",
          "the hill farm", "the glass house"]
THINGS = ["a lantern", "a copper kettle", "a blue kite", "a map", "a wooden flute",
          "a basket of pears", "a brass key", "a bundle of letters", "a compass",
          "a clay jar", "a red scarf", "a ball of twine"]
ADJ = ["quiet", "bright", "cold", "windy", "grey", "warm", "misty", "clear", "long", "busy"]
TIMES = ["In the morning", "At noon", "Late in the evening", "Before dawn", "After supper",
         "On the first day of spring", "When the bells rang", "Just after the rain"]
VERBS = ["found", "carried", "mended", "painted", "lost", "traded", "hid", "polished"]
FEEL = ["glad", "puzzled", "tired", "proud", "curious", "calm", "worried", "cheerful"]
NUM = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
       "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
       "eighteen", "nineteen", "twenty"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEATHER = ["rain", "sun", "fog", "snow", "wind", "hail", "drizzle", "clouds"]
FOODS = ["barley", "onions", "lentils", "apples", "carrots", "beans", "plums", "rye flour"]
STEPS = ["Wash", "Chop", "Stir", "Boil", "Bake", "Mix", "Simmer", "Season"]


def story(r):
    a, b = r.sample(NAMES, 2)
    animal, place, thing = r.choice(ANIMALS), r.choice(PLACES), r.choice(THINGS)
    lines = [
        f"{r.choice(TIMES)}, {a} walked to {place}.",
        f"The day was {r.choice(ADJ)} and the path was {r.choice(ADJ)}.",
        f"Near {place} a {animal} watched from the grass.",
        f"{a} {r.choice(VERBS)} {thing} and showed it to {b}.",
        f"{b} said: \"I have never seen {thing} like that.\"",
        f"{a} felt {r.choice(FEEL)}, and {b} felt {r.choice(FEEL)}.",
    ]
    if r.random() < 0.5:
        lines.append(f"The {animal} ran away toward {r.choice(PLACES)}.")
    lines.append(f"Then {a} and {b} went home to {r.choice(PLACES)}.")
    return " ".join(lines)


def ledger(r):
    rows = []
    for _ in range(r.randint(3, 6)):
        x, y = r.randint(0, 10), r.randint(0, 10)
        if r.random() < 0.5:
            rows.append(f"{NUM[x]} plus {NUM[y]} is {NUM[x + y]}.")
        else:
            x, y = max(x, y), min(x, y)
            rows.append(f"{NUM[x]} minus {NUM[y]} is {NUM[x - y]}.")
    return "Ledger of " + r.choice(NAMES) + ": " + " ".join(rows)


def weather(r):
    start = r.randrange(7)
    days = []
    for i in range(r.randint(3, 5)):
        t = r.randint(-3, 24)
        days.append(f"{DAYS[(start + i) % 7]}: {r.choice(WEATHER)}, {t} degrees.")
    return f"Weather at {r.choice(PLACES)}. " + " ".join(days)


def recipe(r):
    foods = r.sample(FOODS, 3)
    steps = [f"{r.choice(STEPS)} the {f} for {NUM[r.randint(2, 20)]} minutes." for f in foods]
    return (f"Recipe for {r.choice(ADJ)} {foods[0]} soup, from {r.choice(NAMES)}. "
            + " ".join(steps) + " Serve it warm.")


def letter(r):
    a, b = r.sample(NAMES, 2)
    return (f"Dear {b}, the {r.choice(ANIMALS)} came back to {r.choice(PLACES)} on "
            f"{r.choice(DAYS)}. I {r.choice(VERBS)} {r.choice(THINGS)} for you. "
            f"Write soon. Yours, {a}.")


def generate(kb=160, seed=1234):
    r = random.Random(seed)
    kinds = [story, story, story, ledger, weather, recipe, letter]
    out, size = [], 0
    while size < kb * 1024:
        para = r.choice(kinds)(r)
        out.append(para)
        size += len(para) + 2
    return "\n\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kb", type=int, default=160)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "corpus.txt"))
    a = p.parse_args()
    text = generate(a.kb, a.seed)
    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {len(text.encode())} bytes")


if __name__ == "__main__":
    main()
