"""The generated catalog's vocabulary: 5 top-level categories (as in WebShop: beauty, food,
fashion, furniture, electronics), 30 product types, each with its search query, Amazon-style
category path, title heads (with their nouns), materials, attributes, option groups and prices.

Every noun a title can contain is marked here (heads, materials, extras, audiences; brands and
model codes are proper nouns), so the generator records each title's noun list exactly.
"""
from __future__ import annotations

import dataclasses

COLORS = ("black", "white", "navy blue", "grey", "red", "beige", "brown", "dark green", "pink",
          "light blue", "khaki", "burgundy", "olive", "ivory", "teal", "purple", "yellow",
          "silver", "rose gold", "gold", "coral", "mint", "charcoal", "lavender")
APPAREL_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
MEN_SHOE_SIZES = ("7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "13")
WOMEN_SHOE_SIZES = ("5", "5.5", "6", "6.5", "7", "7.5", "8", "8.5", "9", "10", "11")
PACKS = ("pack of 1", "pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12")


@dataclasses.dataclass(frozen=True)
class ProductType:
    key: str
    category: str                 # WebShop's top-level category
    query: str                    # the search query the product was "scraped" with
    path: str                     # product_category, parts separated by " › "
    heads: tuple                  # ((title text, nouns), ...)
    materials: tuple              # ((title text, nouns), ...) ingredients, fabrics, origins
    attributes: tuple             # attribute phrases (WebShop's items_ins_v2 "attributes")
    options: tuple                # ((option name, values, (min, max) values shown), ...)
    price: tuple                  # (low, high) dollars
    uses: str                     # what it is for (description text)
    audience: tuple = ()          # ((title text, nouns, instruction text), ...) e.g. Men's
    extras: tuple = ()            # ((title suffix, nouns), ...)
    model_codes: bool = False     # titles carry a model code (electronics)


# adjectives per category (never nouns)
ADJECTIVES = {
    "beauty": ("Natural", "Gentle", "Professional", "Nourishing", "Premium", "Luxury", "Daily",
               "Lightweight", "Hydrating", "Organic"),
    "food": ("Organic", "Gourmet", "Premium", "Classic", "Natural", "Healthy", "Fresh",
             "Delicious", "Authentic", "Crunchy"),
    "fashion": ("Classic", "Casual", "Comfortable", "Lightweight", "Stylish", "Slim", "Soft",
                "Vintage", "Modern", "Athletic"),
    "furniture": ("Modern", "Rustic", "Sturdy", "Compact", "Elegant", "Minimalist", "Classic",
                  "Farmhouse", "Industrial", "Contemporary"),
    "electronics": ("Portable", "Compact", "Smart", "Fast", "Durable", "Premium", "Ultra Slim",
                    "Rechargeable", "Universal", "Advanced"),
}

# marketing sentences for descriptions ({brand}, {head}, {uses} are filled in)
DESCRIPTION_SENTENCES = (
    "Every {head} from {brand} is made to last.",
    "{brand} designs products for {uses}.",
    "Our team tests each {head} before it ships.",
    "Backed by a 30 day satisfaction guarantee from {brand}.",
    "A thoughtful gift for family and friends.",
    "Customers choose {brand} for quality they can trust.",
    "Carefully packaged to arrive in perfect condition.",
    "The {head} you reach for every day.",
)

SYLLABLES = ("ve", "lo", "ra", "ka", "mi", "zen", "tor", "qua", "lux", "nor", "bri", "sol", "pa",
             "dex", "ri", "an", "mo", "vi", "ta", "cor", "el", "fin", "gro", "hal", "jun", "kor",
             "lum", "mar", "nex", "om", "pry", "sa", "tu", "ul", "wex", "yo")


def _t(key, category, query, path, heads, materials, attributes, options, price, uses,
       audience=(), extras=(), model_codes=False):
    return ProductType(key, category, query, path, tuple(heads), tuple(materials),
                       tuple(attributes), tuple(options), tuple(price), uses, tuple(audience),
                       tuple(extras), model_codes)


# modifiers that may appear in heads and materials but are not nouns
NON_NOUNS = frozenset("""matte liquid wireless portable protective slim extra virgin deluxe mixed
flat strappy analog ergonomic herbal moisturizing clarifying daily round deep cold pressed
synthetic faux braided engineered stainless high green dark medium ground athletic crew
trail lift top workout walking running""".split())


def _h(text):
    """A head/material/extra and its nouns: its words, lower-cased, less ``NON_NOUNS``."""
    words = text.replace("-", " ").lower().split()
    return (text, tuple(w for w in words if w not in NON_NOUNS))


MEN = (("Men's", ("men",), "men's"),)
WOMEN = (("Women's", ("women",), "women's"),)
UNISEX = (("Unisex", (), ""),)

TYPES = (
    # ---------------------------------------------------------------- beauty
    _t("shampoo", "beauty", "sulfate free shampoo",
       "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
       [_h("Shampoo"), _h("Moisturizing Shampoo"), _h("Clarifying Shampoo"),
        _h("Shampoo and Conditioner Set")],
       [_h("Argan Oil"), _h("Tea Tree"), _h("Coconut"), _h("Biotin"), _h("Keratin"),
        _h("Aloe Vera")],
       ["sulfate free", "paraben free", "natural ingredients", "tea tree", "essential oils",
        "dry hair", "hair growth", "cruelty free", "color safe", "damaged hair", "fine hair",
        "long lasting"],
       [("scent", ("lavender", "coconut", "unscented", "citrus", "eucalyptus", "peppermint",
                   "fresh"), (2, 5)),
        ("size", ("8 fl oz", "12 fl oz", "16 fl oz", "33.8 fl oz"), (2, 4))],
       (6, 35), "healthy, shiny hair every day"),
    _t("moisturizer", "beauty", "face moisturizer",
       "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
       [_h("Face Moisturizer"), _h("Night Cream"), _h("Daily Face Cream"),
        _h("Face Lotion")],
       [_h("Hyaluronic Acid"), _h("Vitamin C"), _h("Retinol"), _h("Shea Butter"),
        _h("Collagen"), _h("Niacinamide")],
       ["fine lines", "dry skin", "sensitive skin", "anti aging", "dermatologist tested",
        "fragrance free", "non greasy", "oil free", "cruelty free", "hyaluronic acid",
        "paraben free", "long lasting"],
       [("size", ("1.7 fl oz", "2.5 fl oz", "3.4 fl oz", "5 fl oz"), (2, 4)),
        ("style", ("gel", "lotion", "balm"), (0, 3))],
       (9, 60), "soft, smooth and hydrated skin"),
    _t("lipstick", "beauty", "matte lipstick",
       "Beauty & Personal Care › Makeup › Lips › Lipstick",
       [_h("Matte Lipstick"), _h("Liquid Lipstick"), _h("Lip Stain"), _h("Lipstick Set")],
       [_h("Vitamin E"), _h("Jojoba Oil"), _h("Beeswax"), _h("Shea Butter")],
       ["long lasting", "highly pigmented", "cruelty free", "waterproof", "smudge proof",
        "moisturizing formula", "vegan", "easy to apply", "travel size", "paraben free"],
       [("color", ("ruby red", "nude pink", "berry", "coral", "mauve", "plum", "rose",
                   "burgundy"), (3, 7)),
        ("size", ("pack of 1", "pack of 2", "pack of 3"), (0, 3))],
       (5, 30), "bold color that lasts all day"),
    _t("nail_polish", "beauty", "gel nail polish",
       "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
       [_h("Gel Nail Polish"), _h("Nail Polish Set"), _h("Nail Lacquer")],
       [_h("Gel"), _h("Shimmer"), _h("Glitter")],
       ["long lasting", "quick dry", "chip resistant", "high gloss", "non toxic", "easy to apply",
        "nail art", "salon quality", "uv light", "soak off"],
       [("color", ("red", "pink", "nude", "purple", "teal", "black", "coral", "gold"), (3, 7)),
        ("size", ("pack of 1", "pack of 6", "pack of 12"), (0, 3))],
       (6, 28), "salon quality manicures at home"),
    _t("perfume", "beauty", "eau de parfum for women",
       "Beauty & Personal Care › Fragrance › Women's › Eau de Parfum",
       [_h("Eau de Parfum"), _h("Perfume Spray"), _h("Eau de Toilette")],
       [_h("Vanilla"), _h("Jasmine"), _h("Sandalwood"), _h("Citrus"), _h("Amber")],
       ["long lasting", "floral scent", "travel size", "fresh scent", "gift set", "cruelty free",
        "alcohol free", "easy to carry"],
       [("size", ("1 fl oz", "1.7 fl oz", "3.4 fl oz", "6.7 fl oz"), (2, 4))],
       (18, 140), "a signature scent for day and night", audience=WOMEN),
    _t("brushes", "beauty", "makeup brush set",
       "Beauty & Personal Care › Tools & Accessories › Makeup Brushes & Tools › Brush Sets",
       [_h("Makeup Brush Set"), _h("Makeup Brushes"), _h("Foundation Brush Set")],
       [_h("Synthetic Bristles"), _h("Bamboo Handle"), _h("Wood Handle")],
       ["soft bristles", "travel case", "cruelty free", "easy to clean", "high quality",
        "dense bristles", "vegan", "gift box"],
       [("color", ("black", "rose gold", "pink", "white", "silver", "purple"), (2, 5)),
        ("size", ("10 piece", "14 piece", "18 piece"), (0, 3))],
       (8, 45), "flawless makeup application"),
    # ---------------------------------------------------------------- food
    _t("coffee", "food", "ground coffee",
       "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
       [_h("Ground Coffee"), _h("Medium Roast Coffee"), _h("Dark Roast Ground Coffee")],
       [_h("Arabica"), _h("Colombian"), _h("Ethiopian"), _h("Sumatra"), _h("Guatemala")],
       ["gluten free", "non gmo", "usda organic", "fair trade", "kosher certified",
        "resealable bag", "low acid", "rich flavor", "natural flavor", "freshly roasted"],
       [("flavor name", ("original", "hazelnut", "vanilla", "french roast", "mocha",
                         "breakfast blend"), (2, 5)),
        ("size", ("12 ounce", "24 ounce", "2 pound"), (1, 3))],
       (7, 40), "a rich cup of coffee every morning"),
    _t("protein_bar", "food", "protein bars",
       "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars",
       [_h("Protein Bars"), _h("Protein Snack Bars"), _h("Energy Bars")],
       [_h("Whey"), _h("Almond"), _h("Oat"), _h("Peanut")],
       ["gluten free", "high protein", "low sugar", "non gmo", "keto friendly", "low carb",
        "individually wrapped", "plant based", "no artificial sweeteners", "dairy free"],
       [("flavor name", ("chocolate chip", "peanut butter", "cookies and cream",
                         "salted caramel", "birthday cake", "almond crunch"), (2, 5)),
        ("size", ("pack of 12", "pack of 15", "pack of 24"), (1, 3))],
       (12, 45), "energy between meals and after workouts"),
    _t("tea", "food", "green tea bags",
       "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Green Tea",
       [_h("Green Tea"), _h("Green Tea Bags"), _h("Herbal Tea")],
       [_h("Matcha"), _h("Sencha"), _h("Chamomile"), _h("Ginseng")],
       ["caffeine free", "usda organic", "non gmo", "individually wrapped", "gluten free",
        "kosher certified", "natural flavor", "antioxidant rich", "sugar free"],
       [("flavor name", ("jasmine", "peppermint", "honey", "ginger", "original", "berry"),
         (2, 5)),
        ("size", ("20 count", "50 count", "100 count"), (1, 3))],
       (5, 25), "a calm moment any time of day"),
    _t("nuts", "food", "mixed nuts",
       "Grocery & Gourmet Food › Snack Foods › Nuts & Seeds › Mixed Nuts",
       [_h("Mixed Nuts"), _h("Deluxe Mixed Nuts"), _h("Trail Mix")],
       [_h("Cashews"), _h("Almonds"), _h("Pecans"), _h("Pistachios")],
       ["high protein", "non gmo", "resealable bag", "gluten free", "kosher certified",
        "no artificial", "heart healthy", "keto friendly", "plant based"],
       [("flavor name", ("roasted", "salted", "honey roasted", "unsalted", "sea salt"), (2, 5)),
        ("size", ("8 ounce", "16 ounce", "2 pound", "3 pound"), (1, 4))],
       (6, 35), "a crunchy snack at home or on the go"),
    _t("olive_oil", "food", "extra virgin olive oil",
       "Grocery & Gourmet Food › Pantry Staples › Cooking Oils › Olive Oils",
       [_h("Extra Virgin Olive Oil"), _h("Olive Oil"), _h("Cold Pressed Olive Oil")],
       [_h("Italian"), _h("Greek"), _h("Spanish"), _h("California")],
       ["cold pressed", "first cold pressed", "non gmo", "kosher certified", "usda organic",
        "glass bottle", "rich flavor", "gluten free", "single origin"],
       [("size", ("16.9 fl oz", "25.3 fl oz", "33.8 fl oz", "68 fl oz"), (1, 4)),
        ("style", ("pack of 1", "pack of 2", "pack of 3"), (0, 3))],
       (9, 55), "cooking, dressings and dipping"),
    _t("candy", "food", "sugar free gummy candy",
       "Grocery & Gourmet Food › Candy & Chocolate › Gummy Candies",
       [_h("Gummy Candy"), _h("Gummy Bears"), _h("Gummies")],
       [_h("Fruit"), _h("Pectin")],
       ["sugar free", "gluten free", "individually wrapped", "fat free", "non gmo",
        "natural flavor", "vegan", "kosher certified", "party favors"],
       [("flavor name", ("assorted fruit", "sour", "cherry", "watermelon", "strawberry"),
         (2, 5)),
        ("size", PACKS, (1, 4))],
       (5, 30), "sweet treats without the sugar"),
    # ---------------------------------------------------------------- fashion
    _t("running_shoes", "fashion", "men's running shoes",
       "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running",
       [_h("Running Shoes"), _h("Trail Running Shoes"),
        _h("Athletic Sneakers"), _h("Walking Shoes")],
       [_h("Mesh"), _h("Knit"), _h("Leather"), _h("Suede"), _h("Canvas")],
       ["non slip", "rubber sole", "lace up", "arch support", "memory foam", "breathable mesh",
        "shock absorbing", "machine washable", "wide toe box", "cushioned insole"],
       [("color", COLORS, (3, 7)), ("size", MEN_SHOE_SIZES, (4, 9))],
       (25, 120), "running, walking, gym training and everyday wear", audience=MEN),
    _t("yoga_pants", "fashion", "women's yoga pants",
       "Clothing, Shoes & Jewelry › Women › Clothing › Active › Active Pants › Leggings",
       [_h("Yoga Pants"), _h("High Waist Leggings"),
        _h("Workout Leggings")],
       [_h("Nylon"), _h("Spandex"), _h("Cotton"), _h("Polyester")],
       ["high waist", "tummy control", "moisture wicking", "four way stretch", "machine wash",
        "quick drying", "squat proof", "elastic waistband", "side pockets", "butt lifting"],
       [("color", COLORS, (3, 7)), ("size", APPAREL_SIZES, (4, 7))],
       (14, 50), "yoga, running and everyday comfort", audience=WOMEN),
    _t("tshirt", "fashion", "men's t-shirt",
       "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
       [_h("T-Shirt"), _h("Crew Neck T-Shirt"), _h("Tee Shirt")],
       [_h("Cotton"), _h("Polyester"), _h("Jersey")],
       ["short sleeve", "crew neck", "machine wash", "cotton blend", "regular fit", "slim fit",
        "moisture wicking", "tagless", "pre shrunk", "soft fabric"],
       [("color", COLORS, (3, 7)), ("size", APPAREL_SIZES, (4, 7))],
       (8, 35), "everyday wear, layering and workouts", audience=MEN,
       extras=[_h("Pack"), ("for Summer", ("summer",))]),
    _t("sandals", "fashion", "women's flat sandals",
       "Clothing, Shoes & Jewelry › Women › Shoes › Sandals › Flat Sandals",
       [_h("Flat Sandals"), _h("Slide Sandals"), _h("Strappy Sandals")],
       [_h("Faux Leather"), _h("Suede"), _h("Cork")],
       ["open toe", "ankle strap", "rubber sole", "arch support", "non slip", "memory foam",
        "adjustable strap", "faux leather", "comfortable fit"],
       [("color", COLORS, (3, 6)), ("size", WOMEN_SHOE_SIZES, (4, 9))],
       (15, 70), "summer days, beach trips and casual outings", audience=WOMEN),
    _t("cap", "fashion", "baseball cap",
       "Clothing, Shoes & Jewelry › Men › Accessories › Hats & Caps › Baseball Caps",
       [_h("Baseball Cap"), _h("Dad Hat"), _h("Trucker Hat")],
       [_h("Cotton"), _h("Denim"), _h("Polyester")],
       ["adjustable strap", "curved brim", "machine wash", "sun protection", "breathable",
        "unisex design", "embroidered logo", "low profile"],
       [("color", COLORS, (3, 7)), ("size", ("one size", "small medium", "large x-large"),
                                   (0, 3))],
       (9, 30), "sunny days, sports and travel", audience=UNISEX),
    _t("watch", "fashion", "men's analog watch",
       "Clothing, Shoes & Jewelry › Men › Watches › Wrist Watches",
       [_h("Analog Watch"), _h("Wrist Watch"), _h("Chronograph Watch")],
       [_h("Stainless Steel"), _h("Leather"), _h("Titanium")],
       ["water resistant", "stainless steel", "quartz movement", "date display",
        "luminous hands", "scratch resistant", "gift box", "easy to read"],
       [("color", ("black", "silver", "gold", "brown", "navy blue", "rose gold"), (2, 5)),
        ("style", ("leather band", "mesh band", "link bracelet"), (0, 3))],
       (25, 220), "work, dinners and everyday wear", audience=MEN, model_codes=True),
    # ---------------------------------------------------------------- furniture / home
    _t("office_chair", "furniture", "ergonomic office chair",
       "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs › Desk Chairs",
       [_h("Office Chair"), _h("Desk Chair"), _h("Executive Chair"), _h("Computer Chair")],
       [_h("Mesh"), _h("Leather"), _h("Fabric")],
       ["lumbar support", "adjustable height", "high back", "easy assembly", "360 degree swivel",
        "padded armrests", "heavy duty", "breathable mesh", "ergonomic design", "rolling casters"],
       [("color", ("black", "grey", "white", "brown", "navy blue", "pink"), (2, 5))],
       (60, 350), "long days at the desk"),
    _t("bookshelf", "furniture", "bookshelf",
       "Home & Kitchen › Furniture › Home Office Furniture › Bookcases",
       [_h("Bookshelf"), _h("Bookcase"), _h("Storage Shelf"), _h("Ladder Shelf")],
       [_h("Wood"), _h("Metal"), _h("Bamboo"), _h("Engineered Wood")],
       ["easy assembly", "storage space", "living room", "engineered wood", "space saving",
        "anti tip", "open shelves", "sturdy frame", "home office"],
       [("color", ("walnut", "white", "black", "espresso", "natural", "grey"), (2, 5)),
        ("size", ("3 tier", "4 tier", "5 tier"), (1, 3))],
       (35, 260), "books, plants and decor"),
    _t("sheets", "furniture", "queen bed sheet set",
       "Home & Kitchen › Bedding › Sheets & Pillowcases › Sheet & Pillowcase Sets",
       [_h("Bed Sheet Set"), _h("Sheet Set"), _h("Deep Pocket Sheets")],
       [_h("Microfiber"), _h("Cotton"), _h("Bamboo"), _h("Linen")],
       ["deep pocket", "machine washable", "wrinkle free", "breathable", "fade resistant",
        "hypoallergenic", "cooling", "soft fabric", "easy care"],
       [("color", COLORS, (3, 7)), ("size", ("twin", "full", "queen", "king",
                                             "california king"), (3, 5))],
       (20, 120), "a restful night of sleep"),
    _t("pillow_covers", "furniture", "throw pillow covers",
       "Home & Kitchen › Home Décor › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
       [_h("Throw Pillow Covers"), _h("Pillow Covers"), _h("Cushion Covers")],
       [_h("Velvet"), _h("Linen"), _h("Cotton"), _h("Corduroy")],
       ["living room", "hidden zipper", "machine washable", "set of 2", "soft fabric",
        "farmhouse decor", "double sided", "fade resistant"],
       [("color", COLORS, (3, 7)), ("size", ("16 x 16 inch", "18 x 18 inch", "20 x 20 inch"),
                                   (1, 3))],
       (9, 40), "sofas, beds and reading corners"),
    _t("coffee_table", "furniture", "coffee table for living room",
       "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
       [_h("Coffee Table"), _h("Lift Top Coffee Table"),
        _h("Round Coffee Table")],
       [_h("Wood"), _h("Metal"), _h("Glass"), _h("Marble")],
       ["living room", "easy assembly", "storage shelf", "solid wood", "metal frame",
        "space saving", "sturdy frame", "modern design"],
       [("color", ("walnut", "white", "black", "oak", "espresso", "grey"), (2, 5))],
       (45, 300), "the living room and small spaces"),
    _t("rug", "furniture", "area rug living room",
       "Home & Kitchen › Home Décor › Area Rugs, Runners & Pads › Area Rugs",
       [_h("Area Rug"), _h("Shag Rug"), _h("Runner Rug")],
       [_h("Polypropylene"), _h("Jute"), _h("Wool"), _h("Cotton")],
       ["living room", "non slip", "machine washable", "stain resistant", "non shedding",
        "low pile", "pet friendly", "easy to clean"],
       [("color", ("grey", "beige", "navy blue", "ivory", "burgundy", "teal", "charcoal"), (2, 5)),
        ("size", ("2 x 3 ft", "3 x 5 ft", "5 x 7 ft", "8 x 10 ft"), (2, 4))],
       (20, 240), "warm, comfortable floors"),
    # ---------------------------------------------------------------- electronics
    _t("earbuds", "electronics", "wireless earbuds",
       "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
       [_h("Wireless Earbuds"), _h("Bluetooth Earbuds"), _h("Earphones")],
       [_h("Bluetooth 5.3"), _h("Bluetooth 5.0")],
       ["noise cancelling", "long battery life", "water resistant", "charging case",
        "touch control", "hands free", "built in microphone", "fast charging", "deep bass"],
       [("color", ("black", "white", "navy blue", "pink", "grey", "mint"), (2, 5))],
       (15, 150), "music, calls and workouts", model_codes=True),
    _t("phone_case", "electronics", "phone case",
       "Electronics › Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
       [_h("Phone Case"), _h("Protective Case"), _h("Slim Case")],
       [_h("Silicone"), _h("TPU"), _h("Leather")],
       ["shockproof", "wireless charging", "screen protector", "slim fit", "drop protection",
        "raised edges", "anti scratch", "easy to install"],
       [("color", COLORS, (3, 7)),
        ("style", ("iphone 13", "iphone 14", "iphone 15", "galaxy s23", "pixel 8"), (2, 5))],
       (6, 40), "everyday protection of your phone"),
    _t("cable", "electronics", "usb c charging cable",
       "Electronics › Computers & Accessories › Cables & Interconnects › USB Cables",
       [_h("USB C Cable"), _h("Charging Cable"), _h("USB C Charger Cable")],
       [_h("Braided Nylon"), _h("Aluminum")],
       ["fast charging", "braided nylon", "data transfer", "durable", "tangle free",
        "high speed", "pack of 3", "universal compatibility"],
       [("size", ("3 ft", "6 ft", "10 ft"), (1, 3)), ("color", ("black", "white", "grey",
                                                               "red", "navy blue"), (0, 4))],
       (6, 25), "phones, tablets and laptops", model_codes=True),
    _t("power_bank", "electronics", "portable power bank",
       "Electronics › Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
       [_h("Power Bank"), _h("Portable Charger"), _h("Battery Pack")],
       [_h("Lithium Polymer"), _h("Aluminum")],
       ["fast charging", "usb c", "led display", "dual output", "compact size", "high capacity",
        "travel friendly", "wireless charging"],
       [("color", ("black", "white", "navy blue", "pink", "silver"), (2, 4)),
        ("size", ("10000mah", "20000mah", "26800mah"), (1, 3))],
       (15, 70), "charging on the go", model_codes=True),
    _t("speaker", "electronics", "portable bluetooth speaker",
       "Electronics › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
       [_h("Bluetooth Speaker"), _h("Portable Speaker"), _h("Wireless Speaker")],
       [_h("Fabric"), _h("Aluminum"), _h("Rubber")],
       ["waterproof", "long battery life", "deep bass", "built in microphone", "stereo sound",
        "hands free", "easy to carry", "outdoor use"],
       [("color", ("black", "blue", "red", "grey", "teal", "green"), (2, 5))],
       (20, 180), "music at home, the beach and parties", model_codes=True),
    _t("mouse", "electronics", "wireless mouse",
       "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Mice",
       [_h("Wireless Mouse"), _h("Computer Mouse"), _h("Ergonomic Mouse")],
       [_h("USB Receiver"), _h("Bluetooth")],
       ["ergonomic design", "silent click", "long battery life", "adjustable dpi",
        "plug and play", "rechargeable", "easy to carry", "precise tracking"],
       [("color", ("black", "white", "grey", "pink", "navy blue", "mint"), (2, 5))],
       (8, 60), "laptops and desktop computers", model_codes=True),
)

CATEGORIES = tuple(sorted({t.category for t in TYPES}))
