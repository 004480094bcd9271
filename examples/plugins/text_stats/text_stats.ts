// text_stats is an example plugin in AssemblyScript: a read-only tool that
// counts the characters, words, lines and sentences of a text.
//
// Build: see README.md (asc with the kit's abort handler).

import { registerTool, Call, Output, quote } from "../../../pdk/assemblyscript/index";
export { describe, call, validate, decide } from "../../../pdk/assemblyscript/index";

function isSpace(c: i32): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d || c == 0x0b || c == 0x0c || c == 0xa0 || c == 0x3000;
}

function stats(c: Call): Output {
  const text = c.input.getString("text");
  if (text == null) return Output.error("text (a string) is required");
  let characters = 0;
  let words = 0;
  let lines = text.length > 0 ? 1 : 0;
  let sentences = 0;
  let inWord = false;
  let sentenceOpen = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    // count code points: a surrogate pair is one character
    if (!(ch >= 0xdc00 && ch <= 0xdfff)) characters++;
    if (ch == 0x0a) lines++;
    if (isSpace(ch)) {
      inWord = false;
    } else if (!inWord) {
      inWord = true;
      words++;
    }
    if (ch == 0x2e || ch == 0x21 || ch == 0x3f) {
      if (sentenceOpen) sentences++;
      sentenceOpen = false;
    } else if (!isSpace(ch)) {
      sentenceOpen = true;
    }
  }
  if (sentenceOpen) sentences++;
  const bytes = String.UTF8.byteLength(text);
  return Output.json(
    '{"characters":' + characters.toString() + ',"bytes":' + bytes.toString() + ',"words":' + words.toString() +
      ',"lines":' + lines.toString() + ',"sentences":' + sentences.toString() + ',"first_words":' +
      quote(firstWords(text, 5)) + "}",
  );
}

function firstWords(text: string, n: i32): string {
  const words = new Array<string>();
  let start = -1;
  for (let i = 0; i <= text.length && words.length < n; i++) {
    const space = i == text.length || isSpace(text.charCodeAt(i));
    if (space && start >= 0) {
      words.push(text.substring(start, i));
      start = -1;
    } else if (!space && start < 0) {
      start = i;
    }
  }
  return words.join(" ");
}

registerTool(
  "text_stats",
  "Count the characters, bytes, words, lines and sentences of a text.",
  `{"type":"object","properties":{"text":{"type":"string","description":"The text to measure."}},"required":["text"],"additionalProperties":false}`,
  "read",
  true,
  0,
  stats,
);
