// Rational numbers, affine expressions and symbolic interval arithmetic.
#include "analysis/affine.h"

#include <cassert>
#include <numeric>

#include "fmt/format.h"

namespace tofu {

Rational::Rational(int64_t n, int64_t d) {
  assert(d != 0 && "zero denominator");
  if (d < 0) {
    n = -n;
    d = -d;
  }
  int64_t g = std::gcd(n < 0 ? -n : n, d);
  num_ = g ? n / g : 0;
  den_ = g ? d / g : 1;
}

int64_t Rational::floor() const {
  int64_t q = num_ / den_;
  return (num_ % den_ != 0 && num_ < 0) ? q - 1 : q;
}

int64_t Rational::ceil() const {
  int64_t q = num_ / den_;
  return (num_ % den_ != 0 && num_ > 0) ? q + 1 : q;
}

Rational Rational::operator+(const Rational &o) const {
  return Rational(num_ * o.den_ + o.num_ * den_, den_ * o.den_);
}
Rational Rational::operator-(const Rational &o) const {
  return Rational(num_ * o.den_ - o.num_ * den_, den_ * o.den_);
}
Rational Rational::operator*(const Rational &o) const {
  return Rational(num_ * o.num_, den_ * o.den_);
}
Rational Rational::operator/(const Rational &o) const {
  return Rational(num_ * o.den_, den_ * o.num_);
}
bool Rational::operator<(const Rational &o) const { return num_ * o.den_ < o.num_ * den_; }

std::string Rational::str() const {
  return den_ == 1 ? std::to_string(num_) : fmt::format("{}/{}", num_, den_);
}

AffineExpr AffineExpr::symbol(unsigned s) {
  AffineExpr e;
  e.terms_.push_back({s, Rational(1)});
  return e;
}

AffineExpr AffineExpr::operator+(const AffineExpr &o) const {
  AffineExpr r;
  r.constant_ = constant_ + o.constant_;
  size_t i = 0, j = 0;
  while (i < terms_.size() || j < o.terms_.size()) {
    if (j == o.terms_.size() || (i < terms_.size() && terms_[i].first < o.terms_[j].first)) {
      r.terms_.push_back(terms_[i++]);
    } else if (i == terms_.size() || o.terms_[j].first < terms_[i].first) {
      r.terms_.push_back(o.terms_[j++]);
    } else {
      Rational c = terms_[i].second + o.terms_[j].second;
      if (c.sign() != 0)
        r.terms_.push_back({terms_[i].first, c});
      ++i;
      ++j;
    }
  }
  return r;
}

AffineExpr AffineExpr::operator-() const { return *this * Rational(-1); }

AffineExpr AffineExpr::operator-(const AffineExpr &o) const { return *this + (-o); }

AffineExpr AffineExpr::operator*(const Rational &k) const {
  AffineExpr r;
  if (k.sign() == 0)
    return r;
  r.constant_ = constant_ * k;
  for (const auto &[s, c] : terms_)
    r.terms_.push_back({s, c * k});
  return r;
}

AffineExpr AffineExpr::operator/(const Rational &k) const { return *this * (Rational(1) / k); }

Rational AffineExpr::coefficient(unsigned s) const {
  for (const auto &[sym, c] : terms_)
    if (sym == s)
      return c;
  return Rational(0);
}

bool AffineExpr::provablyNonNegative() const {
  // With every symbol >= 1, the minimum is reached at symbols = 1 when all coefficients
  // are non-negative; a negative coefficient makes the expression unbounded below.
  Rational min = constant_;
  for (const auto &[s, c] : terms_) {
    if (c.sign() < 0)
      return false;
    min = min + c;
  }
  return min.sign() >= 0;
}

Rational AffineExpr::evaluate(const std::vector<int64_t> &values) const {
  Rational v = constant_;
  for (const auto &[s, c] : terms_)
    v = v + c * Rational(values.at(s));
  return v;
}

std::string AffineExpr::str(const std::function<std::string(unsigned)> &name) const {
  std::string out;
  for (const auto &[s, c] : terms_) {
    Rational a = c.sign() < 0 ? -c : c;
    std::string term = name(s);
    if (a.num() != 1)
      term = fmt::format("{}*{}", a.num(), term);
    if (a.den() != 1)
      term += fmt::format("/{}", a.den());
    if (out.empty())
      out = c.sign() < 0 ? "-" + term : term;
    else
      out += (c.sign() < 0 ? " - " : " + ") + term;
  }
  if (constant_.sign() != 0 || out.empty()) {
    if (out.empty())
      out = constant_.str();
    else
      out += (constant_.sign() < 0 ? " - " : " + ") +
             (constant_.sign() < 0 ? -constant_ : constant_).str();
  }
  return out;
}

size_t AffineExpr::hash() const {
  size_t h = std::hash<int64_t>()(constant_.num()) * 31 + std::hash<int64_t>()(constant_.den());
  for (const auto &[s, c] : terms_)
    h = h * 1000003 ^ (std::hash<unsigned>()(s) * 17 + std::hash<int64_t>()(c.num()) * 7 +
                       std::hash<int64_t>()(c.den()));
  return h;
}

SymInterval SymInterval::operator*(const Rational &k) const {
  if (k.sign() >= 0)
    return {lo * k, hi * k};
  return {hi * k, lo * k};
}

SymInterval SymInterval::floorDiv(int64_t k) const {
  assert(k > 0 && "division by a positive constant only");
  if (k == 1)
    return *this;
  return {(lo - AffineExpr(Rational(k - 1))) / Rational(k), hi / Rational(k)};
}

} // namespace tofu
