// Steward's Markdown renderer: model text to safe HTML.
//
// Safety rule: the input is HTML-escaped FIRST (& < > " '), and only then
// are the few Markdown constructs turned into tags this file writes itself.
// Nothing from the text can open a tag or an attribute; link targets are
// kept only when they start with http:// or https://. Code (fenced or
// inline) is set aside before any inline rule runs, so it is shown as is.
//
// Supported: ``` fences (with a language and a copy button; an unclosed
// fence while streaming runs to the end), `inline code`, **bold**,
// *italic* / _italic_, ~~strike~~, # headings, - * + and 1. lists (nested
// by indentation), > blockquotes, --- rules, [links](https://...), bare
// https:// links, simple | tables |, paragraphs (single newlines kept as
// line breaks, as chat models mean them).
(function () {
  'use strict';

  function esc(s) {
    return String(s)
      .replace(/&/g, '&amp;')
      .replace(/</g, '&lt;')
      .replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;')
      .replace(/'/g, '&#39;');
  }

  // Placeholders: \u0000<n>\u0000 (NUL never survives in rendered text:
  // it is stripped from the input first).
  function Stash() {
    this.items = [];
  }
  Stash.prototype.put = function (html) {
    this.items.push(html);
    return '\u0000' + (this.items.length - 1) + '\u0000';
  };
  Stash.prototype.restore = function (s) {
    var items = this.items;
    // Restore repeatedly: a stashed link label may hold stashed code.
    for (var k = 0; k < 3 && s.indexOf('\u0000') >= 0; k++) {
      s = s.replace(/\u0000(\d+)\u0000/g, function (_, i) {
        return items[+i];
      });
    }
    return s;
  };

  var SAFE_URL = /^https?:\/\/[^\s<>"'`]+$/i;

  // Inline rules on ALREADY ESCAPED text.
  function inline(s, stash) {
    // Inline code first: its content is shown verbatim.
    s = s.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, function (_, ticks, code) {
      return stash.put('<code>' + code.replace(/^ (.*) $/, '$1') + '</code>');
    });
    // [label](url): only http(s) targets become links; others stay text.
    // (An image, ![alt](url), is shown as a link: pages load no image.)
    s = s.replace(/!?\[([^\]\n]+)\]\(([^()\s]+)(?:\s+&quot;[^\n]*?&quot;)?\)/g, function (m, label, url) {
      var raw = url.replace(/&amp;/g, '&');
      if (!SAFE_URL.test(raw)) return m;
      return stash.put(
        '<a href="' + url + '" target="_blank" rel="noopener noreferrer nofollow">' +
          emphasis(label) + '</a>'
      );
    });
    // Bare links.
    s = s.replace(/(^|[\s(])(https?:\/\/[^\s<>\u0000]*[^\s<>\u0000.,;:!?)\]'])/gi, function (m, pre, url) {
      if (/&(quot|#39|lt|gt);/.test(url)) {
        // An escaped quote or bracket ends a URL.
        var cut = url.search(/&(quot|#39|lt|gt);/);
        var rest = url.slice(cut);
        url = url.slice(0, cut);
        if (!url) return m;
        return pre + stash.put(link(url)) + rest;
      }
      return pre + stash.put(link(url));
    });
    return emphasis(s);
  }

  function link(url) {
    return '<a href="' + url + '" target="_blank" rel="noopener noreferrer nofollow">' + url + '</a>';
  }

  function emphasis(s) {
    s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
    s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
    s = s.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>');
    s = s.replace(/(^|[^_\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?![_\w])/g, '$1<em>$2</em>');
    s = s.replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
    return s;
  }

  var RE_FENCE = /^ {0,3}(```+|~~~+)\s*([\w.+#-]*)[^`]*$/;
  var RE_HEAD = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  var RE_HR = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  var RE_QUOTE = /^ {0,3}&gt;\s?(.*)$/;
  var RE_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  var RE_TABLE_SEP = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

  function codeBlock(lang, lines, stash) {
    var cls = lang ? ' class="language-' + lang.replace(/[^\w.+#-]/g, '') + '"' : '';
    var label = lang ? '<span class="code-lang">' + lang + '</span>' : '<span class="code-lang">text</span>';
    return stash.put(
      '<div class="codeblock">' +
        '<div class="code-head">' + label +
        '<button type="button" class="copy" data-testid="copy-code" title="Copy code">Copy</button></div>' +
        '<pre><code' + cls + '>' + lines.join('\n') + '</code></pre></div>'
    );
  }

  function splitRow(line) {
    var t = line.trim();
    if (t.charAt(0) === '|') t = t.slice(1);
    if (t.charAt(t.length - 1) === '|') t = t.slice(0, -1);
    return t.split('|').map(function (c) {
      return c.trim();
    });
  }

  // Blocks on ESCAPED lines.
  function blocks(lines, stash) {
    var out = [];
    var para = [];
    var i = 0;

    function flush() {
      if (para.length) {
        out.push('<p>' + inline(para.join('\n'), stash).replace(/\n/g, '<br>') + '</p>');
        para = [];
      }
    }

    while (i < lines.length) {
      var line = lines[i];
      var m;

      if ((m = RE_FENCE.exec(line))) {
        flush();
        var fence = m[1];
        var lang = m[2] || '';
        var body = [];
        i++;
        while (i < lines.length) {
          var l = lines[i];
          if (l.trim().indexOf(fence.charAt(0) === '`' ? '```' : '~~~') === 0 &&
              /^ {0,3}(```+|~~~+)\s*$/.test(l)) {
            i++;
            break;
          }
          body.push(l);
          i++;
        }
        out.push(codeBlock(lang, body, stash));
        continue;
      }
      if (/^\s*$/.test(line)) {
        flush();
        i++;
        continue;
      }
      if ((m = RE_HEAD.exec(line))) {
        flush();
        var n = m[1].length;
        out.push('<h' + n + '>' + inline(m[2], stash) + '</h' + n + '>');
        i++;
        continue;
      }
      if (RE_HR.test(line) && !(para.length && /^\s*-+\s*$/.test(line))) {
        flush();
        out.push('<hr>');
        i++;
        continue;
      }
      if (RE_QUOTE.test(line)) {
        flush();
        var q = [];
        while (i < lines.length && (m = RE_QUOTE.exec(lines[i]))) {
          q.push(m[1]);
          i++;
        }
        out.push('<blockquote>' + blocks(q, stash) + '</blockquote>');
        continue;
      }
      if (RE_ITEM.test(line)) {
        flush();
        var r = list(lines, i, stash);
        out.push(r.html);
        i = r.next;
        continue;
      }
      if (line.indexOf('|') >= 0 && i + 1 < lines.length && RE_TABLE_SEP.test(lines[i + 1]) &&
          lines[i + 1].indexOf('-') >= 0) {
        flush();
        var head = splitRow(line);
        i += 2;
        var rows = [];
        while (i < lines.length && lines[i].indexOf('|') >= 0 && !/^\s*$/.test(lines[i])) {
          rows.push(splitRow(lines[i]));
          i++;
        }
        var t = '<div class="table-wrap"><table><thead><tr>';
        head.forEach(function (c) {
          t += '<th>' + inline(c, stash) + '</th>';
        });
        t += '</tr></thead><tbody>';
        rows.forEach(function (row) {
          t += '<tr>';
          for (var k = 0; k < head.length; k++) t += '<td>' + inline(row[k] || '', stash) + '</td>';
          t += '</tr>';
        });
        out.push(t + '</tbody></table></div>');
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
    return out.join('');
  }

  function indentOf(s) {
    var m = /^(\s*)/.exec(s);
    return m[1].replace(/\t/g, '    ').length;
  }

  // A list starting at lines[i]; items deeper than the first item's
  // indentation (or continuation lines) belong to the item above.
  function list(lines, i, stash) {
    var first = RE_ITEM.exec(lines[i]);
    var base = indentOf(lines[i]);
    var ordered = /\d/.test(first[2]);
    var start = ordered ? parseInt(first[2], 10) : 1;
    var items = [];
    var cur = null;
    while (i < lines.length) {
      var line = lines[i];
      var m = RE_ITEM.exec(line);
      if (m && indentOf(line) <= base + 1) {
        var isOrd = /\d/.test(m[2]);
        if (isOrd !== ordered) break;
        cur = [m[3]];
        items.push(cur);
        i++;
        continue;
      }
      if (/^\s*$/.test(line)) {
        // A blank line ends the list unless the next line continues it.
        var nx = lines[i + 1];
        if (nx !== undefined && (indentOf(nx) > base || (RE_ITEM.test(nx) && indentOf(nx) <= base + 1))) {
          if (cur) cur.push('');
          i++;
          continue;
        }
        break;
      }
      if (indentOf(line) > base || (cur && !RE_ITEM.test(line) && !RE_FENCE.test(line) && !RE_HEAD.test(line) && !RE_QUOTE.test(line))) {
        if (!cur) break;
        cur.push(line.replace(new RegExp('^\\s{0,' + (base + 4) + '}'), ''));
        i++;
        continue;
      }
      break;
    }
    var tag = ordered ? 'ol' : 'ul';
    var html = '<' + tag + (ordered && start !== 1 ? ' start="' + start + '"' : '') + '>';
    items.forEach(function (it) {
      var inner = blocks(it, stash);
      // A one-paragraph item is shown without the <p>.
      var m = /^<p>([\s\S]*?)<\/p>$/.exec(inner);
      if (m && m[1].indexOf('<p>') < 0) inner = m[1];
      html += '<li>' + inner + '</li>';
    });
    return { html: html + '</' + tag + '>', next: i };
  }

  function render(text) {
    var stash = new Stash();
    var src = String(text == null ? '' : text).replace(/\u0000/g, '').replace(/\r\n?/g, '\n');
    var lines = esc(src).split('\n');
    return stash.restore(blocks(lines, stash));
  }

  window.StewardMD = { render: render, escape: esc };
})();
