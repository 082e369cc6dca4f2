from humps import camelize


def test_words():
    assert camelize("hello_world") == "helloWorld"
    assert camelize("already_camel_case") == "alreadyCamelCase"
    assert camelize("_hidden") == "_hidden"


def test_one_letter_word():
    assert camelize("test_n_test") == "testNTest"


def test_one_letter_first_word():
    assert camelize("p_value") == "pValue"
