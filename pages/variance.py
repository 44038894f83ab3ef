import streamlit as st

st.title("variance")
st.info("coming")
