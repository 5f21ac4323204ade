<?xml version="1.0" encoding="UTF-8"?>
<!--
  Shows an Atom or RSS feed of feedbridge as a readable page when a browser opens it; feed readers
  ignore it. Every value is output as text, so XSLT escapes it; disable-output-escaping is never used.
  Only http(s) links become hrefs. The durable view is the feed's `.html` twin, linked at the top,
  since browsers are dropping XSLT.
-->
<xsl:stylesheet version="1.0"
    xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
    xmlns:atom="http://www.w3.org/2005/Atom"
    xmlns:dc="http://purl.org/dc/elements/1.1/"
    xmlns:slash="http://purl.org/rss/1.0/modules/slash/"
    exclude-result-prefixes="atom dc slash">
  <xsl:output method="html" encoding="UTF-8" indent="no"
      doctype-system="about:legacy-compat"/>

  <xsl:variable name="upper" select="'ABCDEFGHIJKLMNOPQRSTUVWXYZ'"/>
  <xsl:variable name="lower" select="'abcdefghijklmnopqrstuvwxyz'"/>

  <xsl:template match="/">
    <xsl:variable name="title" select="atom:feed/atom:title | rss/channel/title"/>
    <xsl:variable name="self" select="atom:feed/atom:link[@rel='self']/@href | rss/channel/atom:link[@rel='self']/@href"/>
    <html lang="en">
      <head>
        <meta charset="utf-8"/>
        <meta name="viewport" content="width=device-width, initial-scale=1"/>
        <title><xsl:value-of select="$title"/> · feedbridge</title>
        <link rel="icon" type="image/svg+xml" href="/static/icon.svg"/>
        <link rel="stylesheet" href="/static/pages.css"/>
      </head>
      <body class="xsl-view">
        <header class="site"><a class="brand" href="/">feedbridge</a>
          <span class="tagline">Atom, RSS and JSON feeds for Discourse forums</span></header>
        <main id="main">
          <h1 id="feed-title"><xsl:value-of select="$title"/></h1>
          <p class="lead">This is a feed. To follow it, copy this page's address into your feed reader:</p>
          <p><code id="feed-address"><xsl:value-of select="$self"/></code></p>
          <xsl:if test="$self">
            <xsl:variable name="path" select="substring-before(concat($self, '?'), '?')"/>
            <xsl:variable name="query" select="substring-after($self, '?')"/>
            <xsl:variable name="stem">
              <xsl:choose>
                <xsl:when test="substring($path, string-length($path) - 4) = '.atom'">
                  <xsl:value-of select="substring($path, 1, string-length($path) - 5)"/></xsl:when>
                <xsl:otherwise><xsl:value-of select="substring($path, 1, string-length($path) - 4)"/></xsl:otherwise>
              </xsl:choose>
            </xsl:variable>
            <p><xsl:call-template name="link">
              <xsl:with-param name="href" select="concat($stem, '.html', substring('?', 1, string-length($query)), $query)"/>
              <xsl:with-param name="text" select="'The same feed as a web page'"/>
              <xsl:with-param name="id" select="'html-view'"/>
            </xsl:call-template></p>
          </xsl:if>
          <ol class="entries">
            <xsl:apply-templates select="atom:feed/atom:entry | rss/channel/item"/>
          </ol>
        </main>
      </body>
    </html>
  </xsl:template>

  <xsl:template match="atom:entry | item">
    <xsl:variable name="link" select="atom:link/@href | link"/>
    <li class="entry">
      <h3 class="entry-title">
        <xsl:call-template name="link">
          <xsl:with-param name="href" select="string($link)"/>
          <xsl:with-param name="text" select="string(atom:title | title)"/>
        </xsl:call-template>
      </h3>
      <p class="entry-meta">
        <xsl:choose>
          <!-- A digest's period (its id is the feed's list, `#` and its query, then /digest/PERIOD: a forum under a
               /digest folder has it before the `#`): from its start to its newest activity; no author. -->
          <xsl:when test="contains(substring-after(string(atom:id | guid), '#'), '/digest/')">
            <xsl:value-of select="atom:published | pubDate"/>
            <xsl:if test="atom:updated"><xsl:text> to </xsl:text><xsl:value-of select="atom:updated"/></xsl:if>
          </xsl:when>
          <xsl:otherwise>
            <xsl:choose>
              <xsl:when test="atom:author/atom:name | dc:creator">
                <xsl:text>by </xsl:text><xsl:value-of select="atom:author/atom:name | dc:creator"/>
              </xsl:when>
              <xsl:otherwise>by a deleted user</xsl:otherwise>
            </xsl:choose>
            <xsl:if test="slash:comments">
              <xsl:text> · </xsl:text><xsl:value-of select="slash:comments"/><xsl:text> replies</xsl:text>
            </xsl:if>
            <!-- Atom's `updated` is the last activity; RSS's `pubDate` the creation where the list gives it. -->
            <xsl:if test="atom:updated"><xsl:text> · last activity </xsl:text><xsl:value-of select="atom:updated"/></xsl:if>
            <xsl:if test="pubDate"><xsl:text> · </xsl:text><xsl:value-of select="pubDate"/></xsl:if>
          </xsl:otherwise>
        </xsl:choose>
      </p>
      <xsl:choose>
        <xsl:when test="atom:summary">
          <p class="entry-excerpt"><xsl:value-of select="atom:summary"/></p>
        </xsl:when>
        <xsl:when test="description">
          <!-- RSS descriptions are HTML by convention; feedbridge's are escaped plain text (an item's content, when it
               has any, is in content:encoded beside it): unescape as text. -->
          <p class="entry-excerpt">
            <xsl:call-template name="unescape"><xsl:with-param name="text" select="string(description)"/></xsl:call-template>
          </p>
        </xsl:when>
      </xsl:choose>
    </li>
  </xsl:template>

  <xsl:template name="link">
    <xsl:param name="href"/>
    <xsl:param name="text"/>
    <xsl:param name="id"/>
    <xsl:variable name="scheme" select="translate(substring-before($href, ':'), $upper, $lower)"/>
    <xsl:choose>
      <xsl:when test="$scheme = 'http' or $scheme = 'https'">
        <a href="{$href}">
          <xsl:if test="$id"><xsl:attribute name="id"><xsl:value-of select="$id"/></xsl:attribute></xsl:if>
          <xsl:value-of select="$text"/>
        </a>
      </xsl:when>
      <xsl:otherwise><xsl:value-of select="$text"/></xsl:otherwise>
    </xsl:choose>
  </xsl:template>

  <!-- &lt; &gt; &amp; back to characters, output as text (so escaped again by XSLT). A text longer than 64
       characters is cut in two just before an `&` and each part unescaped on its own: no reference holds an
       `&`, so the parts read as the whole does, and the depth of the calls grows with the logarithm of the
       text's length, where one call per `&` made libxslt give up past about 900 of them ("too many nested
       calls", an excerpt of 1,000 `<`). The first part runs from the start to the first `&` at or after the
       middle; with none after the middle, it runs to five characters past it (a reference cut by the middle,
       `&quot;` at most, ends there) and the rest is plain text. -->
  <xsl:template name="unescape">
    <xsl:param name="text"/>
    <xsl:variable name="half" select="floor(string-length($text) div 2)"/>
    <xsl:variable name="after" select="substring($text, $half + 1)"/>
    <xsl:choose>
      <xsl:when test="string-length($text) &gt; 64 and contains($after, '&amp;')">
        <xsl:call-template name="unescape">
          <xsl:with-param name="text" select="concat(substring($text, 1, $half), substring-before($after, '&amp;'))"/>
        </xsl:call-template>
        <xsl:call-template name="unescape">
          <xsl:with-param name="text" select="concat('&amp;', substring-after($after, '&amp;'))"/>
        </xsl:call-template>
      </xsl:when>
      <xsl:when test="string-length($text) &gt; 64 and contains($text, '&amp;')">
        <xsl:call-template name="unescape">
          <xsl:with-param name="text" select="substring($text, 1, $half + 5)"/>
        </xsl:call-template>
        <xsl:value-of select="substring($text, $half + 6)"/>
      </xsl:when>
      <xsl:when test="contains($text, '&amp;')">
        <xsl:value-of select="substring-before($text, '&amp;')"/>
        <xsl:variable name="rest" select="substring-after($text, '&amp;')"/>
        <xsl:choose>
          <xsl:when test="starts-with($rest, 'lt;')"><xsl:text>&lt;</xsl:text><xsl:call-template name="unescape"><xsl:with-param name="text" select="substring($rest, 4)"/></xsl:call-template></xsl:when>
          <xsl:when test="starts-with($rest, 'gt;')"><xsl:text>&gt;</xsl:text><xsl:call-template name="unescape"><xsl:with-param name="text" select="substring($rest, 4)"/></xsl:call-template></xsl:when>
          <xsl:when test="starts-with($rest, 'amp;')"><xsl:text>&amp;</xsl:text><xsl:call-template name="unescape"><xsl:with-param name="text" select="substring($rest, 5)"/></xsl:call-template></xsl:when>
          <xsl:when test="starts-with($rest, 'quot;')"><xsl:text>"</xsl:text><xsl:call-template name="unescape"><xsl:with-param name="text" select="substring($rest, 6)"/></xsl:call-template></xsl:when>
          <xsl:otherwise><xsl:text>&amp;</xsl:text><xsl:call-template name="unescape"><xsl:with-param name="text" select="$rest"/></xsl:call-template></xsl:otherwise>
        </xsl:choose>
      </xsl:when>
      <xsl:otherwise><xsl:value-of select="$text"/></xsl:otherwise>
    </xsl:choose>
  </xsl:template>
</xsl:stylesheet>
