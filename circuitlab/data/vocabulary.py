"""Word lists of the story generator, one list per category label.

Each list is a category of `circuitlab.data.stories.LABELS`. The lists are pairwise disjoint (a test checks
it), so a word's label is never ambiguous between two lists; a word can still take another label from its
role in a fixed phrase ("that night" is a TIME phrase, "the night" a NOUN).

The adjectives of the noun -> adjective facts (`circuitlab.data.facts.FACTS`) are kept out of the general
adjective lists here: a fact adjective only ever describes its own noun, which is what lets a small model
learn "The turtle was" -> " slow".
"""

from __future__ import annotations

import circuitlab.data.morphology as morphology

FEMALE_NAMES: tuple[str, ...] = (
    "Lily", "Sue", "Anna", "Mia", "Lucy", "Emma", "Sara", "Amy", "Kate", "Jane",
    "Mary", "Ella", "Zoe", "Chloe", "Grace", "Ruby", "Sophie", "Olivia", "Ava", "Emily",
    "Hannah", "Lisa", "Nora", "Rosa", "Julia", "Clara", "Alice", "Molly", "Holly", "Katie",
    "Abby", "Jenny", "Ellie", "Maya", "Leah", "Nina", "Tina", "Lena", "Eva", "Ivy",
    "Jill", "Beth", "Poppy", "Rosie", "Bella", "Stella", "Luna", "Layla", "Hazel", "Iris",
    "Fiona", "Gina", "Heidi", "Irene", "Kelly", "Laura", "Megan", "Naomi", "Paula", "Rachel",
    "Sally", "Tara", "Vera", "Wendy", "Zara", "Amelia", "Bonnie", "Carla", "Dora", "Erin",
    "Flora", "Greta", "Helen", "Isla", "Jess", "Kim", "Lola", "Mira", "Nell", "Rita",
    "Sofia", "Tess", "Uma", "Wanda", "Abigail",
)

MALE_NAMES: tuple[str, ...] = (
    "Tom", "Ben", "Tim", "Max", "Sam", "Jack", "Leo", "Jake", "Joe", "Bob",
    "Dan", "Fred", "Harry", "Henry", "Jim", "John", "Kevin", "Luke", "Mark", "Mike",
    "Nick", "Oscar", "Paul", "Peter", "Ryan", "Sid", "Ted", "Tony", "Adam", "Alex",
    "Andy", "Billy", "Bruno", "Carl", "Charlie", "Chris", "David", "Eddie", "Eli", "Ethan",
    "Felix", "Finn", "Frank", "George", "Gus", "Hugo", "Ian", "Jacob", "James", "Jay",
    "Jon", "Kyle", "Liam", "Louis", "Lucas", "Matt", "Milo", "Ned", "Noah", "Oliver",
    "Owen", "Pete", "Ralph", "Rex", "Ricky", "Roy", "Sean", "Simon", "Steve", "Theo",
    "Toby", "Victor", "Walter", "Zack", "Arthur", "Caleb", "Dylan", "Evan", "Gary", "Hank",
)

ANIMALS: tuple[str, ...] = (
    "dog", "cat", "bird", "fish", "frog", "duck", "cow", "horse", "sheep", "goat",
    "pig", "chicken", "rabbit", "bear", "lion", "tiger", "elephant", "monkey", "giraffe", "zebra",
    "turtle", "snail", "owl", "fox", "wolf", "deer", "squirrel", "mouse", "hamster", "puppy",
    "kitten", "parrot", "penguin", "dolphin", "whale", "shark", "octopus", "crab", "butterfly", "bee",
    "ant", "ladybug", "spider", "worm", "snake", "lizard", "dinosaur", "dragon", "unicorn", "cheetah",
    "sloth", "kangaroo", "koala", "panda", "hippo", "camel", "goose", "swan", "pony", "seal",
)

OBJECTS: tuple[str, ...] = (
    "ball", "toy", "doll", "kite", "book", "hat", "box", "cup", "bowl", "spoon",
    "car", "truck", "train", "boat", "bike", "block", "crayon", "pencil", "drum", "bell",
    "blanket", "pillow", "chair", "table", "lamp", "clock", "key", "ring", "necklace", "shoe",
    "sock", "coat", "scarf", "dress", "shirt", "bag", "basket", "bucket", "shovel", "stick",
    "rock", "leaf", "flower", "apple", "banana", "cookie", "cake", "bread", "soup", "honey",
    "lemon", "candy", "pie", "sandwich", "carrot", "egg", "balloon", "feather", "candle", "knife",
    "glue", "window", "door", "puzzle", "robot", "shell", "sticker", "jar", "bottle", "plate",
    "fork", "brush", "comb", "mirror", "umbrella", "rope", "map", "letter", "card", "gift",
    "coin", "button", "ribbon", "crown", "wand", "sword", "whistle", "flute", "guitar", "piano",
    "trumpet", "swing", "tent", "towel", "soap", "rocket", "plane", "wagon", "sled", "helmet",
    "glove", "backpack", "bed", "teapot", "marble", "pebble",
)

PLACES: tuple[str, ...] = (
    "park", "garden", "forest", "beach", "school", "house", "kitchen", "library", "farm", "zoo",
    "pond", "lake", "river", "ocean", "mountain", "desert", "playground", "shop", "castle", "cave",
    "field", "meadow", "town", "village", "yard", "bedroom", "hill", "island", "jungle", "road",
    "market", "bakery", "barn", "museum",
)

# Nouns that are neither characters' names, animals, objects nor places: people, nature, abstractions.
NOUNS: tuple[str, ...] = (
    "girl", "boy", "friend", "friends", "mom", "dad", "teacher", "grandma", "grandpa", "baby",
    "king", "queen", "witch", "monster", "clown", "sun", "moon", "sky", "snow", "rain",
    "wind", "thunder", "cloud", "star", "night", "ice", "day", "noise", "smile", "fun",
    "moral", "story", "time", "truth", "lunch", "tree", "bath",
)

COLOURS: tuple[str, ...] = (
    "red", "blue", "green", "yellow", "orange", "purple", "pink", "brown", "black", "white", "gray", "silver",
)

# General adjectives, split by what they usually describe. None of them is a fact adjective.
FEELINGS: tuple[str, ...] = (
    "happy", "sad", "angry", "scared", "excited", "tired", "hungry", "thirsty", "proud", "shy",
    "silly", "curious", "lonely", "grumpy", "worried", "calm", "surprised", "bored", "sorry", "glad",
    "cheerful", "nervous", "sick", "lucky",
)
DESCRIPTIONS: tuple[str, ...] = (
    "little", "small", "big", "old", "new", "nice", "good", "beautiful", "special", "favorite",
    "broken", "lost", "clean", "messy", "noisy", "colorful", "magic", "secret", "strange", "short",
    "fancy", "plain", "sparkly", "dusty", "rusty", "precious", "giant", "lovely", "wonderful", "amazing",
    "warm", "cozy", "tidy", "gentle", "friendly", "smart", "polite", "naughty", "helpful",
    "careful", "young", "great", "best",
)
ADJECTIVES: tuple[str, ...] = FEELINGS + DESCRIPTIONS
# Adjectives that fit a character ("a little girl", "a friendly dog").
CHARACTER_ADJECTIVES: tuple[str, ...] = (
    "little", "small", "big", "nice", "good", "friendly", "smart", "gentle", "young", "happy", "curious",
    "shy", "silly", "polite", "helpful", "careful", "cheerful", "lucky", "naughty", "short",
)
# Adjectives that fit a thing ("a shiny ball" is not here: shiny belongs to the star fact).
THING_ADJECTIVES: tuple[str, ...] = (
    "little", "small", "big", "old", "new", "nice", "beautiful", "special", "broken", "clean",
    "messy", "noisy", "colorful", "magic", "secret", "strange", "fancy", "plain", "sparkly", "dusty",
    "rusty", "precious", "giant", "lovely", "wonderful", "amazing", "favorite", "warm", "cozy", "tidy",
    "lost",
)

NUMBERS: tuple[str, ...] = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")

# (base, past) forms. Intransitive verbs make a sentence alone; transitive ones take a thing.
INTRANSITIVE_VERBS: tuple[tuple[str, str], ...] = (
    ("play", "played"), ("run", "ran"), ("jump", "jumped"), ("dance", "danced"), ("sing", "sang"),
    ("swim", "swam"), ("walk", "walked"), ("laugh", "laughed"), ("hop", "hopped"), ("skip", "skipped"),
    ("draw", "drew"), ("read", "read"), ("paint", "painted"), ("explore", "explored"), ("bake", "baked"),
    ("rest", "rested"), ("sleep", "slept"), ("wait", "waited"), ("clap", "clapped"), ("splash", "splashed"),
)
TRANSITIVE_VERBS: tuple[tuple[str, str], ...] = (
    ("find", "found"), ("like", "liked"), ("want", "wanted"), ("take", "took"), ("hold", "held"),
    ("hug", "hugged"), ("throw", "threw"), ("catch", "caught"), ("kick", "kicked"), ("push", "pushed"),
    ("pull", "pulled"), ("carry", "carried"), ("fix", "fixed"), ("open", "opened"), ("clean", "cleaned"),
    ("wash", "washed"), ("build", "built"), ("make", "made"), ("drop", "dropped"), ("buy", "bought"),
    ("pick", "picked"), ("touch", "touched"), ("watch", "watched"), ("see", "saw"), ("love", "loved"),
    ("share", "shared"), ("keep", "kept"), ("hide", "hid"), ("show", "showed"), ("paint", "painted"),
)
SPEECH_VERBS: tuple[str, ...] = ("said", "asked", "shouted", "whispered", "replied", "cried", "yelled")

# English plurals ("box" -> "boxes", "mouse" -> "mice") come from the shared morphology rules.
plural = morphology.plural
