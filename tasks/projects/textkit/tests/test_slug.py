import pytest
from textkit import TRANSLITERATIONS, SlugError, slugify, transliterate, unique_slug


def test_transliterate_replaces_accented_letters():
    assert transliterate("café naïve über") == "cafe naive uber"


def test_transliterate_keeps_case_of_capitals():
    assert transliterate("Ørsted Æsir ÉTÉ") == "Orsted Aesir ETE"


def test_transliterate_multi_letter_replacements_and_unknown_characters():
    assert transliterate("straße œuvre 東京") == "strasse oeuvre 東京"
    assert TRANSLITERATIONS["þ"] == "th"


def test_slugify_basic_sentence():
    assert slugify("Hello, World! It's 2024") == "hello-world-its-2024"


def test_slugify_transliterates_and_drops_other_symbols():
    assert slugify("  Crème Brûlée — à la carte  ") == "creme-brulee-a-la-carte"
    assert slugify("日本 tokyo") == "tokyo"


def test_slugify_custom_separator():
    assert slugify("Déjà Vu again", separator="_") == "deja_vu_again"
    assert slugify("a b", separator="--") == "a--b"


def test_slugify_rejects_bad_separator():
    with pytest.raises(SlugError, match="'x'"):
        slugify("a b", separator="x")
    with pytest.raises(SlugError, match="''"):
        slugify("a b", separator="")


def test_slugify_max_length_cuts_on_word_boundary():
    assert slugify("one two three four", max_length=13) == "one-two-three"
    assert slugify("one two three four", max_length=12) == "one-two"
    assert slugify("one two", max_length=7) == "one-two"


def test_slugify_max_length_cuts_single_long_word():
    assert slugify("extraordinary claims", max_length=5) == "extra"
    assert slugify("abc def", max_length=1) == "a"


def test_slugify_rejects_non_positive_max_length():
    with pytest.raises(SlugError, match="got 0"):
        slugify("abc", max_length=0)


def test_unique_slug_returns_base_when_free():
    assert unique_slug("My Post", {"other"}) == "my-post"


def test_unique_slug_appends_first_free_counter():
    assert unique_slug("My Post", {"my-post", "my-post-2"}) == "my-post-3"
    assert unique_slug("My Post", {"my-post", "my-post-3"}) == "my-post-2"
    assert unique_slug("My Post", {"my_post"}, separator="_") == "my_post_2"


def test_unique_slug_rejects_empty_slug():
    with pytest.raises(SlugError, match="'!!!'"):
        unique_slug("!!!", set())
