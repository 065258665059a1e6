"""Word lists of the lexicon (`circuitlab.data.lexicon`), one tuple of lemmas per category label.

They extend the story generator's lists (`circuitlab.data.vocabulary`) and the natural stories' prompt words
(data/natural/prompt_words.json) with the everyday words of children's stories; inflected forms ("puppies",
"ran", "happier") are made by `circuitlab.data.morphology`, so only lemmas are listed here.
"""

from __future__ import annotations

ANIMALS = (
    "ant", "ape", "badger", "bat", "beaver", "beetle", "bird", "buffalo", "bug", "bull", "bunny", "calf", "canary",
    "caterpillar", "chick", "chipmunk", "cricket", "crocodile", "crow", "cub", "donkey", "dove", "dragonfly",
    "duckling", "eagle", "eel", "elk", "ferret", "firefly", "flamingo", "fly", "foal", "gecko", "gerbil",
    "gorilla", "grasshopper", "gull", "hawk", "hedgehog", "hen", "heron", "jellyfish", "lamb", "leopard",
    "llama", "lobster", "mole", "moose", "mosquito", "moth", "mule", "newt", "ostrich", "otter", "ox", "panther",
    "peacock", "pelican", "pigeon", "piglet", "platypus", "poodle", "porcupine", "possum", "puffin",
    "raccoon", "rat", "raven", "reindeer", "rhino", "robin", "rooster", "salmon", "seagull", "seahorse",
    "skunk", "sparrow", "starfish", "stork", "tadpole", "toad", "trout", "walrus", "wasp", "weasel",
    "woodpecker", "yak", "kitty", "doggy", "bunny", "pup", "beast", "creature", "animal", "pet", "dragon",
)

OBJECTS = (
    "acorn", "anchor", "apron", "axe", "badge", "bandage", "barrel", "bat", "battery", "bead", "bench", "berry",
    "bicycle", "blade", "bone", "boot", "bow", "bracelet", "branch", "brick", "broom", "bubble", "bun", "bus",
    "butter", "cage", "camera", "can", "cap", "carpet", "cart", "chain", "chalk", "cheese", "cherry", "chip",
    "chocolate", "cloak", "cloth", "coin", "compass", "cone", "cookie", "corn", "costume", "couch", "cracker",
    "cradle", "cream", "crumb", "crust", "cupcake", "curtain", "cushion", "desk", "diamond", "dish", "dough",
    "doughnut", "drawer", "drink", "envelope", "eraser", "fan", "fence", "flag", "flashlight", "food", "fruit",
    "gate", "glass", "glasses", "glitter", "globe", "grape", "hammer", "handle", "hook", "hose", "ink", "jacket",
    "jam", "jeans", "jelly", "jewel", "jigsaw", "juice", "kettle", "ladder", "lantern", "lid", "lollipop",
    "lunchbox", "magnet", "marker", "mask", "mat", "meat", "medal", "milk", "mitten", "mop", "muffin", "mug",
    "nail", "napkin", "needle", "net", "noodle", "nut", "oar", "orange", "paddle", "pail", "pan", "pancake",
    "pants", "paper", "pasta", "pea", "peach", "peanut", "pear", "pearl", "pen", "phone", "photo", "picture",
    "pillowcase", "pin", "pipe", "pizza", "pocket", "popcorn", "pot", "potato", "present", "pudding", "pumpkin",
    "puppet", "purse", "quilt", "radio", "raft", "rake", "rice", "rug", "sack", "sail", "sailboat", "salad",
    "salt", "sauce", "saw", "scissors", "scooter", "screen", "seed", "sheet", "ship", "shoelace", "shorts",
    "skate", "skirt", "slipper", "snack", "sofa", "spade", "sponge", "spoon", "stamp", "statue", "stool",
    "straw", "string", "sugar", "suitcase", "sweater", "tablet", "tape", "tea", "teddy", "telescope", "ticket",
    "tie", "toast", "tomato", "tool", "toothbrush", "torch", "tractor", "tray", "treasure", "trophy", "tube",
    "tv", "van", "vase", "vest", "violin", "wallet", "watch", "water", "wheel", "wire", "yarn", "yogurt",
    "zipper", "thing", "things", "stuff", "treat", "meal", "dinner", "breakfast", "supper", "pie", "jar",
    "picnic", "sandcastle", "snowball", "snowman", "kite", "paint", "paintbrush", "crayons", "blocks",
)

PLACES = (
    "attic", "backyard", "basement", "bathroom", "bay", "bridge", "brook", "bush", "cabin", "camp", "canyon",
    "city", "classroom", "cliff", "closet", "clearing", "corner", "cottage", "country", "creek", "den", "ditch",
    "dock", "farmhouse", "fountain", "garage", "glade", "hall", "harbor", "hallway", "hive", "hole", "home",
    "hospital", "hut", "kingdom", "land", "lane", "lawn", "meadow", "moon", "nest", "orchard", "palace",
    "path", "pool", "porch", "puddle", "room", "sea", "seaside", "shed", "shore", "sidewalk", "space", "stable",
    "stage", "station", "store", "stream", "street", "swamp", "tower", "trail", "tunnel", "valley", "wall",
    "woods", "world", "yard", "ground", "floor", "roof", "window", "outside", "inside", "sandbox", "slide",
    "treehouse", "pond", "rainbow",
)

NOUNS = (
    "adventure", "afternoon", "age", "air", "answer", "apple", "arm", "aunt", "baby", "back", "band", "bark",
    "bedtime", "beauty", "bedroom", "belly", "birthday", "bite", "body", "boss", "boy", "brother", "buddy",
    "bump", "cheek", "chef", "child", "chin", "choice", "circle", "class", "color", "colour", "cook", "cousin",
    "crowd", "cry", "dance", "dark", "daughter", "dream", "drop", "dust", "ear", "earth", "edge", "end",
    "evening", "eye", "face", "fact", "family", "farmer", "father", "fear", "feeling", "finger", "fire",
    "fireman", "flame", "fog", "foot", "friendship", "fur", "game", "ghost", "giant", "gift", "girl", "glow",
    "goal", "grandfather", "grandmother", "granny", "grass", "guest", "hair", "hand", "head", "heart", "help",
    "hero", "hill", "hole", "hope", "hour", "hug", "idea", "job", "joke", "joy", "kiss", "knee", "lady",
    "laugh", "leg", "lesson", "life", "light", "line", "lip", "list", "lot", "love", "luck", "magic", "man",
    "mess", "minute", "mistake", "mom", "mommy", "money", "month", "morning", "mother", "mouth", "mud",
    "music", "name", "neck", "neighbor", "nose", "note", "nurse", "oak", "officer", "one", "others", "pain",
    "pair", "parent", "part", "party", "paw", "people", "person", "piece", "pile", "pilot", "pirate", "plan",
    "plant", "player", "police", "pond", "postman", "prince", "princess", "prize", "problem", "promise",
    "puddle", "question", "race", "rainbow", "reason", "rest", "ride", "roar", "rule", "sadness", "sand",
    "secret", "shadow", "shape", "side", "sight", "sign", "sister", "size", "skin", "sky", "sleep", "smell",
    "snack", "soldier", "son", "song", "sound", "space", "spot", "spring", "stone", "storm", "stranger",
    "student", "summer", "sunlight", "sunshine", "surprise", "tail", "taste", "tear", "teeth", "thanks",
    "thumb", "tickle", "toe", "tongue", "top", "touch", "town", "toy", "trick", "trip", "trouble", "turn",
    "uncle", "voice", "walk", "war", "wave", "way", "weather", "week", "while", "wing", "winter", "wish",
    "wizard", "woman", "wood", "word", "work", "world", "year", "zoo", "fairy", "knight", "robot", "alien",
    "daddy", "papa", "mama", "grandpa", "grandma", "mum", "dad", "kids", "children", "everybody", "autumn",
    "fall", "noon", "midnight", "sunset", "sunrise", "dawn", "nap", "tummy", "hat", "bottom", "middle",
    "inside", "outside", "half", "kind", "sort", "bit", "fun", "rose", "tulip", "daisy", "sunflower", "flowers",
    "leaves", "puddles", "wind", "rain", "snow", "ice", "sun", "star", "cloud", "water", "branch", "root",
    "seed", "log", "pebble", "wave", "splash", "thunder", "lightning", "breeze", "hug", "cheer", "clap",
)

ADJECTIVES = (
    "able", "afraid", "alive", "alone", "amazed", "annoyed", "asleep", "awake", "awful", "bad", "bare", "best",
    "better", "bitter", "blank", "bored", "boring", "bouncy", "brand", "brave", "bright", "brilliant", "bumpy",
    "busy", "calm", "cheap", "cheerful", "chilly", "chubby", "clear", "close", "cloudy", "clumsy", "cold",
    "cool", "correct", "crazy", "creepy", "crisp", "crooked", "cross", "cruel", "crunchy", "cuddly", "dangerous",
    "dear", "delicious", "different", "difficult", "dirty", "dizzy", "double", "dreamy", "drowsy", "dry",
    "dull", "dusty", "eager", "early", "easy", "empty", "enormous", "entire", "equal", "evil", "exciting",
    "extra", "fair", "faint", "false", "famous", "fancy", "far", "fat", "fearless", "fierce", "fine", "firm",
    "fit", "flat", "fond", "foolish", "free", "frightened", "frozen", "full", "furry", "fuzzy", "generous",
    "giant", "glad", "gloomy", "glowing", "gold", "golden", "grand", "grateful", "greedy", "grumpy", "guilty",
    "hairy", "handsome", "hard", "helpless", "hidden", "honest", "hopeful", "horrible", "huge", "humble",
    "hurt", "icy", "ill", "important", "impossible", "jealous", "jolly", "joyful", "juicy", "kind", "large",
    "last", "late", "lazy", "left", "light", "little", "live", "lively", "long", "loose", "loud", "low", "mad",
    "magical", "main", "many", "marvelous", "mean", "merry", "mighty", "modest", "muddy", "mysterious",
    "narrow", "near", "neat", "next", "noisy", "normal", "odd", "okay", "open", "ordinary", "other", "own",
    "pale", "patient", "peaceful", "perfect", "pleasant", "pleased", "plump", "poor", "pretty", "prickly",
    "proper", "quick", "quiet", "ready", "real", "right", "ripe", "rough", "round", "royal", "rude", "rusty",
    "safe", "salty", "same", "scary", "selfish", "serious", "shaggy", "shaky", "sharp", "shiny", "simple",
    "sleepy", "slimy", "slippery", "slow", "smooth", "snowy", "soggy", "soft", "solid", "sore", "sour",
    "spare", "sparkling", "speedy", "spicy", "splendid", "spooky", "spotted", "spotty", "squeaky", "steep",
    "sticky", "stiff", "still", "stormy", "straight", "strong", "stubborn", "stuck", "stupid", "sudden",
    "sunny", "super", "sure", "sweet", "swift", "tall", "tame", "tasty", "terrible", "thankful", "thick", "thin",
    "thoughtful", "tight", "tiny", "tough", "tricky", "true", "twinkly", "ugly", "unhappy", "unkind", "upset",
    "useful", "usual", "warm", "weak", "weird", "welcome", "well", "wet", "whole", "wicked", "wide", "wild",
    "windy", "wise", "wobbly", "wonderful", "wooden", "worried", "worse", "worst", "wrong", "yummy", "zany",
    "bald", "bold", "cute", "deep", "enormous", "fast", "fresh", "friendly", "funny", "gentle", "gigantic",
    "good", "happy", "heavy", "helpful", "high", "hot", "hungry", "kind", "lonely", "lovely", "lucky", "messy",
    "naughty", "nervous", "new", "nice", "old", "polite", "proud", "rare", "rich", "sad", "scared", "secret",
    "short", "shy", "silly", "small", "smart", "sparkly", "strange", "striped", "thirsty", "tidy", "tired",
    "young", "big", "clean", "clever", "colorful", "cozy", "curious", "excited", "careful", "beautiful",
    "ashamed", "sorry", "fluffy", "playful", "cheeky", "puffy", "dark", "wet", "loud", "locked", "yummy",
)

VERBS = (
    "add", "agree", "allow", "answer", "appear", "arrive", "ask", "bang", "bark", "bathe", "beg", "begin",
    "believe", "belong", "bend", "bite", "blink", "blow", "boil", "bounce", "bow", "break", "breathe",
    "bring", "brush", "bump", "burn", "burst", "buzz", "call", "care", "carry", "change", "chase", "chat",
    "check", "cheer", "chew", "chirp", "choose", "chop", "clap", "climb", "close", "collect", "comb", "come",
    "cook", "cough", "count", "cover", "crack", "crash", "crawl", "creep", "cross", "cry", "cuddle", "cut",
    "dance", "dare", "decide", "deliver", "dig", "dive", "do", "drag", "dream", "dress", "drift", "drink",
    "drip", "drive", "dry", "dust", "eat", "enjoy", "escape", "explain", "explore", "fail", "fall", "feed",
    "feel", "fetch", "fight", "fill", "find", "finish", "fit", "fix", "flap", "flash", "flip", "float", "flow",
    "fly", "fold", "follow", "forget", "forgive", "freeze", "frown", "gasp", "gather", "get", "giggle", "give",
    "glide", "glow", "go", "grab", "greet", "grin", "grow", "growl", "grumble", "guess", "hang", "happen",
    "hate", "have", "hear", "help", "hide", "hit", "hold", "hop", "hope", "hug", "hum", "hunt", "hurry",
    "hurt", "imagine", "invite", "jog", "join", "jump", "kick", "kiss", "kneel", "knit", "knock", "know",
    "land", "last", "laugh", "lay", "lead", "leak", "lean", "leap", "learn", "leave", "lend", "let", "lick",
    "lie", "lift", "like", "listen", "live", "look", "lose", "love", "make", "march", "matter", "mean", "meet",
    "melt", "miss", "mix", "move", "nap", "need", "nod", "notice", "offer", "open", "pack", "paint", "pass",
    "pat", "pay", "peek", "pet", "pick", "plan", "plant", "play", "point", "poke", "pop", "pour", "pray",
    "pretend", "promise", "protect", "pull", "punch", "push", "put", "race", "rain", "reach", "read", "relax",
    "remember", "repeat", "reply", "rescue", "rest", "return", "ride", "ring", "rip", "rise", "roar", "rock",
    "roll", "rub", "run", "rush", "sail", "save", "say", "scare", "scream", "scribble", "search", "see", "seem",
    "sell", "send", "serve", "set", "sew", "shake", "share", "shine", "shiver", "shout", "show", "shrug",
    "shut", "sigh", "sing", "sink", "sip", "sit", "skate", "ski", "skip", "sleep", "slide", "slip", "smash",
    "smell", "smile", "snap", "sneak", "sneeze", "sniff", "snore", "snuggle", "soar", "sob", "sort", "speak",
    "spend", "spill", "spin", "splash", "spot", "spray", "spread", "squeak", "squeeze", "squish", "stack",
    "stamp", "stand", "stare", "start", "stay", "steal", "step", "stick", "sting", "stir", "stomp", "stop",
    "stretch", "stroke", "study", "stumble", "surprise", "swallow", "sweep", "swim", "swing", "take", "talk",
    "taste", "teach", "tear", "tease", "tell", "thank", "think", "throw", "tickle", "tie", "tiptoe", "toss",
    "touch", "trade", "travel", "trip", "trust", "try", "tuck", "tug", "tumble", "turn", "twirl", "twist",
    "understand", "use", "visit", "wag", "wait", "wake", "walk", "wander", "want", "warn", "wash", "watch",
    "wave", "wear", "weep", "whisper", "whistle", "wiggle", "win", "wink", "wipe", "wish", "wonder", "work",
    "worry", "wrap", "write", "yawn", "yell", "zoom", "borrow", "decorate", "flutter", "juggle", "paddle",
    "sparkle", "sprinkle", "bake", "build", "buy", "catch", "clean", "draw", "drop", "hop", "hug", "keep",
    "kick", "sing", "skip", "splash", "swim", "throw", "tidy", "tiptoe", "jump", "climb", "cry", "cheer",
    "twinkle", "giggle", "name", "learn", "fear", "bloom", "buzz", "quack", "moo", "purr", "meow", "oink",
    "hiss", "howl", "chomp", "munch", "nibble", "gobble", "slurp", "beam", "blush", "wobble", "flop", "plop",
)

ADVERBS = (
    "about", "across", "again", "ago", "ahead", "all", "almost", "alone", "along", "already", "also", "always",
    "anymore", "anyway", "apart", "around", "away", "back", "certainly", "closer", "down", "else", "enough",
    "even", "ever", "everywhere", "far", "fast", "finally", "first", "forever", "forward", "hard", "here",
    "home", "how", "instead", "just", "least", "less", "maybe", "more", "most", "much", "never", "no", "not",
    "nowhere", "off", "often", "on", "once", "only", "out", "outside", "over", "perhaps", "please", "quite",
    "rather", "really", "right", "round", "sometimes", "somewhere", "soon", "still", "straight", "suddenly",
    "super", "sure", "then", "there", "though", "too", "together", "twice", "up", "very", "well", "why",
    "where", "when", "yet", "almost", "anywhere", "inside", "upstairs", "downstairs", "backwards", "away",
    "later", "now", "again", "afterwards", "indeed", "n't",
)

# closed classes
BE = ("be", "am", "is", "are", "was", "were", "been", "being", "'m", "'re")
AUX = ("will", "would", "can", "could", "shall", "should", "may", "might", "must", "do", "does", "did", "have",
       "has", "had", "'ll", "'ve", "'d", "won", "wo", "ca", "having", "done")
PRONOUNS = (
    "i", "me", "my", "mine", "myself", "you", "your", "yours", "yourself", "yourselves", "he", "him", "his",
    "himself", "she", "her", "hers", "herself", "it", "its", "itself", "we", "us", "our", "ours", "ourselves",
    "they", "them", "their", "theirs", "themselves", "this", "these", "those", "someone", "somebody",
    "something", "anyone", "anybody", "anything", "everyone", "everybody", "everything", "nobody", "nothing",
    "none", "each", "other", "others", "one", "who", "whom", "whose", "what", "which", "whoever", "whatever",
)
DETERMINERS = ("a", "an", "the", "every", "each", "some", "any", "no", "another", "both", "either", "neither",
               "few", "several", "such", "all", "that")
PREPOSITIONS = (
    "about", "above", "across", "after", "against", "along", "among", "around", "at", "before", "behind",
    "below", "beneath", "beside", "besides", "between", "beyond", "by", "down", "during", "except", "for",
    "from", "in", "inside", "into", "like", "near", "of", "off", "on", "onto", "out", "outside", "over", "past",
    "since", "through", "throughout", "till", "to", "toward", "towards", "under", "underneath", "until", "up",
    "upon", "with", "within", "without",
)
CONJUNCTIONS = ("and", "but", "or", "so", "because", "if", "than", "that", "though", "although", "unless",
                "while", "whether", "nor", "as", "since", "until", "till", "once", "when", "whenever")
TIME_WORDS = ("today", "tomorrow", "yesterday", "tonight", "sometime", "lately", "meanwhile", "someday")
INTERJECTIONS = (
    "oh", "wow", "yes", "yeah", "yay", "hooray", "hello", "hi", "hey", "bye", "goodbye", "ouch", "oops", "uh",
    "um", "hmm", "ah", "aha", "whoa", "okay", "ok", "please", "thanks", "shh", "boo", "huh", "yum", "ha",
    "woof", "meow", "moo", "quack", "splash", "boom", "bang", "pop", "whoosh", "zoom", "crash", "thud", "achoo",
    "ahem", "alas", "phew", "ugh", "wee", "yuck", "oink", "tweet", "buzz", "ding", "dong", "knock",
)
NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve", "thirteen", "fifteen", "twenty", "thirty", "fifty", "hundred", "thousand", "million",
           "first", "second", "third", "fourth", "fifth", "tenth", "half", "dozen", "once", "twice")
COLOURS = ("red", "blue", "green", "yellow", "orange", "purple", "pink", "brown", "black", "white", "gray",
           "grey", "silver", "gold", "golden", "violet", "indigo", "turquoise")
OTHER = ("there", "to", "not", "let's")

# more everyday words, by label
MORE_NOUNS = (
    "fisherman", "hay", "trunk", "dot", "engine", "baker", "tune", "seat", "web", "weed", "partner", "herd",
    "row", "patch", "slice", "painter", "wool", "beard", "frosting", "granddaughter", "grandson", "moment",
    "recipe", "front", "mayor", "gap", "building", "mark", "beak", "board", "counter", "footprint", "signature",
    "track", "master", "switch", "place", "cardboard", "mail", "carrier", "passenger", "bale", "swimmer",
    "triangle", "flour", "course", "charity", "wedding", "heater", "mind", "winner", "dirt", "coffee", "second",
    "court", "reed", "bank", "pad", "chest", "moss", "driver", "grandchild", "sale", "ankle", "frame",
    "sweetheart", "helper", "moonlight", "horn", "cinnamon", "stripe", "print", "lemonade", "iron", "lock",
    "captain", "deck", "sleepover", "elbow", "yolk", "drain", "frost", "handful", "marshmallow", "angel",
    "snowflake", "shoulder", "ringer", "tire", "saucer", "smudge", "skeleton", "painting", "hoof", "post",
    "machine", "clam", "rubber", "bulb", "steam", "recess", "hatch", "curb", "foil", "doorway", "armful",
    "bathtub", "manners", "bunch", "lap", "timer", "petal", "gust", "shelf", "oven", "pickle", "newspaper",
    "spaghetti", "stair", "stairs", "windowsill", "fern", "caboose", "pajamas", "plug",
)
MORE_OBJECTS = ("seashell", "shell", "crayon", "pencil", "teapot", "marble", "pebble")
MORE_VERBS = (
    "tap", "rumble", "press", "curl", "peck", "argue", "row", "scoop", "pile", "shoot", "trot", "dip", "boom",
    "squelch", "water", "tap", "swish", "blast", "squeal", "gulp", "unwrap", "confuse", "droop", "tighten",
    "tune", "tilt", "sway", "zigzag", "soak", "waddle", "peel", "crunch", "squash", "squawk", "tip", "own",
    "crush", "zip", "seek", "duck", "excuse", "unravel", "click", "owe", "glue", "hammer", "plug", "puff",
    "hatch", "blame", "weave", "cluck", "unpack", "print",
)
MORE_ADJECTIVES = ("damp", "single", "squishy", "wiggly", "greasy", "tangled", "bossy", "confused", "rainy",
                   "embarrassed", "bony", "gummy", "shaped", "soaking")
MORE_ADVERBS = ("somehow", "especially", "backward", "wherever", "cannot")

# the natural corpus's second word list (data/natural/prompt_words.json), by label
PROMPT_ANIMALS = (
    "slug", "oyster", "tortoise", "alligator", "hummingbird",
)
PROMPT_PLACES = (
    "lighthouse", "windmill", "igloo", "cellar", "volcano", "waterfall", "pier", "lagoon", "glacier", "iceberg",
    "marsh", "vineyard", "greenhouse", "carousel", "circus", "restaurant", "airport", "fireplace", "chimney",
)
PROMPT_OBJECTS = (
    "mailbox", "elevator", "canoe", "kayak", "submarine", "helicopter", "ambulance", "firetruck", "tram", "taxi",
    "motorcycle", "skateboard", "wheelbarrow", "trolley", "piggybank", "cupboard", "stove", "fridge", "hammock",
    "fishbowl", "aquarium", "kennel", "leash", "collar", "saddle", "bridle", "carriage", "sleigh", "candlestick",
    "blueberry", "strawberry", "plum", "melon", "watermelon", "pineapple", "coconut", "mango", "pepper",
    "cucumber", "lettuce", "cabbage", "onion", "bean", "mushroom", "walnut", "almond", "raisin", "oatmeal",
    "cereal", "porridge", "biscuit", "pretzel", "omelet", "sausage", "dumpling", "taco", "burrito", "cocoa",
    "ladle", "whisk", "pinecone", "twig", "thorn", "vine", "boulder", "crystal", "gem", "microscope", "computer",
    "television", "telephone", "doorbell", "alarm", "tambourine", "xylophone", "harmonica", "banjo", "harp",
    "bagpipe", "drumstick", "easel", "canvas", "clay", "ruler", "notebook", "diary", "journal", "poster", "cape",
    "tiara", "armor", "shield", "banner", "parachute", "sandal", "raincoat", "overalls", "bonnet", "icicle",
    "trowel", "scarecrow", "haystack", "plow", "postcard", "parcel", "invitation", "campfire",
)
PROMPT_NOUNS = (
    "doctor", "sailor", "artist", "builder", "tusk", "claw", "whisker", "hail", "comet", "planet", "tooth",
    "knuckle", "freckle", "hiccup", "holiday", "festival", "parade", "contest", "riddle",
)
PROMPT_VERBS = (
    "admire", "arrange", "balance", "bury", "calculate", "coax", "comfort", "compare", "dash", "discover", "doze",
    "flicker", "fling", "gallop", "guard", "hiccup", "invent", "itch", "knead", "limp", "mend", "nudge", "obey",
    "pant", "perch", "pinch", "pounce", "practice", "prance", "prepare", "rattle", "recycle", "repair", "rinse",
    "roast", "scatter", "scramble", "scrub", "sketch", "sprout", "squint", "steer", "stroll", "swap", "swirl",
    "thump", "trace", "vanish", "wade", "wrestle", "clatter", "crumble", "dangle", "dribble", "fizz", "gurgle",
    "jiggle", "mumble", "plead", "rhyme", "splatter", "swoop", "tangle", "tinkle", "topple", "trickle", "tremble",
    "wheeze", "wriggle",
)
PROMPT_ADJECTIVES = (
    "ancient", "blind", "breezy", "bubbly", "careless", "chatty", "cranky", "creaky", "crowded", "curly", "dainty",
    "dazzling", "elegant", "enchanted", "faded", "feathery", "fiery", "flimsy", "fragile", "frosty", "fruity",
    "gleaming", "glossy", "gooey", "graceful", "hasty", "hollow", "humid", "itchy", "jumpy", "knobbly", "leafy",
    "lumpy", "magnificent", "melty", "mild", "misty", "moody", "mossy", "mushy", "musical", "nasty", "nimble",
    "nutty", "peppery", "pointy", "quirky", "ragged", "rocky", "rosy", "rotten", "rubbery", "rumbly", "sandy",
    "scratchy", "shallow", "silent", "silky", "skinny", "sleek", "snug", "speckled", "spiky", "squashy", "steady",
    "stinky", "stretchy", "stripy", "sturdy", "sugary", "tender", "thundery", "ticklish", "timid", "toasty",
    "trusty", "velvety", "wavy", "weary", "whispery", "wintry", "woolly", "wrinkly", "homesick", "invisible",
    "puzzled", "scruffy", "starry", "unusual", "valuable",
)
